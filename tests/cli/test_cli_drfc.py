"""DRfC mode: in an activated DeepRacer-for-cloud shell every command works with no flags.

The shell is the DRfC-shaped checkout (tests/drfc) activated by bash itself, its system.env
asking for the GPUs of the example box (GTX_M40).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drgpu.core.facts import ContainerFacts
from drgpu.core.inputs import InputOptions, resolve_inputs
from drgpu.host.files import read_settings
from tests.cli.conftest import GTX_M40, M40, assert_one_error_line
from tests.drfc import RUN_ENV, activated, make_checkout, set_values
from tests.support.runners import Cli


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return make_checkout(
        tmp_path / "deepracer-for-cloud",
        DR_SAGEMAKER_CUDA_DEVICES="1",
        DR_ROBOMAKER_CUDA_DEVICES="0",
    )


def enter(monkeypatch: pytest.MonkeyPatch, environment: dict[str, str]) -> None:
    """Make the test process an activated shell (its DR_* keys exactly these)."""
    for key in [key for key in __import__("os").environ if key.startswith("DR_")]:
        monkeypatch.delenv(key)
    for key, value in environment.items():
        monkeypatch.setenv(key, value)


def test_plan_with_no_flags_plans_the_activated_checkout(
    cli: Cli, checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    enter(monkeypatch, activated(checkout))
    result = cli("plan", "--inventory", GTX_M40, "--json")
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert document["project"] == "deepracer-0"
    assert set(document["services"]) == {"rl_coach", "robomaker"}
    assert document["services"]["robomaker"]["gpus"][0]["uuid"] == M40


def test_render_hands_compose_the_values_activation_exported(
    cli: Cli, checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environment = activated(checkout)
    assert environment["DR_LOCAL_S3_MODEL_METADATA_KEY"] == "custom_files/model_metadata.json"
    enter(monkeypatch, environment)
    target = resolve_inputs(InputOptions(), environment)
    config = read_settings(target, environment)
    handed = {**environment, **config.values}  # what compose_environment gives Compose
    assert handed == {**environment, **{k: v for k, v in handed.items() if k not in environment}}
    assert {k: handed[k] for k in environment} == environment
    assert config.warnings == ()


def test_an_edited_file_is_read_again_as_dr_start_training_does(
    checkout: Path,
) -> None:
    environment = activated(checkout)
    (checkout / "run.env").write_text(RUN_ENV.replace("FastCar", "SlowCar"), encoding="utf-8")
    target = resolve_inputs(InputOptions(), environment)
    config = read_settings(target, environment)
    again = activated(checkout)  # what dr-update-env exports after the edit
    assert config.values["DR_DISPLAY_NAME"] == again["DR_DISPLAY_NAME"] == "SlowCar"
    assert {k: config.values[k] for k in config.values if k in again} == {
        k: again[k] for k in config.values if k in again
    }


def test_eval_switches_files_and_project(
    cli: Cli, checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    enter(monkeypatch, activated(checkout))
    result = cli("plan", "--eval", "--inventory", GTX_M40, "--json")
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert document["project"] == "deepracer-eval-0"
    assert document["run_id"] == "eval-0"
    rendered = cli("render", "--eval", "--inventory", GTX_M40)
    assert "No work for coach" not in rendered.out  # the override, not the stack
    assert "drgpu.run_id: eval-0" in rendered.out


def test_a_second_run_env_is_its_own_run(
    cli: Cli, checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_1 = checkout / "run-1.env"
    run_1.write_text(RUN_ENV.replace("DR_RUN_ID=0", "DR_RUN_ID=1"), encoding="utf-8")
    enter(monkeypatch, activated(checkout, str(run_1)))
    document = json.loads(cli("plan", "--inventory", GTX_M40, "--json").out)
    assert document["project"] == "deepracer-1"


def test_swarm_style_lists_with_c_are_read(
    cli: Cli, checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    system = (checkout / "system.env").read_text().replace("DR_DOCKER_STYLE=compose\n", "")
    (checkout / "system.env").write_text(system)
    environment = activated(checkout)
    assert environment["DR_DOCKER_FILE_SEP"] == "-c"
    assert environment["DR_TRAIN_COMPOSE_FILE"].startswith("-c ")
    target = resolve_inputs(InputOptions(), environment)
    assert target.checkout is not None and target.checkout.file_flag == "-c"
    assert target.compose_files == (
        checkout / "docker" / "docker-compose-training.yml",
        checkout / "docker" / "docker-compose-training-swarm.yml",
        checkout / "docker" / "docker-compose-keys.yml",
    )
    config = read_settings(target, environment)
    assert config.docker_style == "swarm"  # DRfC's default, exported by activation
    assert config.values["DR_ROBOMAKER_TRAIN_PORT"] == "8080"


@pytest.mark.parametrize("flag", ["-f", "-c", "--compose-file", "--file"])
def test_c_is_an_alias_of_f_so_a_drfc_list_can_be_passed_as_it_is(
    cli: Cli, checkout: Path, tmp_path: Path, flag: str
) -> None:
    env = tmp_path / "system.env"
    env.write_text("DR_SAGEMAKER_CUDA_DEVICES=1\nDR_ROBOMAKER_CUDA_DEVICES=0\n")
    docker = checkout / "docker"
    result = cli(
        "plan",
        "--env-file",
        env,
        "--inventory",
        GTX_M40,
        "--json",
        flag,
        docker / "docker-compose-training.yml",
        flag,
        docker / "docker-compose-keys.yml",
    )
    assert result.code == 0, result.err
    assert set(json.loads(result.out)["services"]) == {"rl_coach", "robomaker"}


def test_explicit_flags_win_over_the_activated_shell(
    cli: Cli, checkout: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    enter(monkeypatch, activated(checkout))
    own = tmp_path / "own.env"
    own.write_text("DR_RUN_ID=7\nDR_SAGEMAKER_CUDA_DEVICES=0\n")
    document = json.loads(cli("plan", "--env-file", own, "--inventory", GTX_M40, "--json").out)
    assert document["project"] == "deepracer-7"
    assert set(document["services"]) == {"rl_coach", "robomaker"}  # DRfC's files still
    stack = tmp_path / "stack.yml"
    stack.write_text("services:\n  sagemaker:\n    image: x\n")
    result = cli("plan", "-f", stack, "--inventory", GTX_M40, "--json")
    assert set(json.loads(result.out)["services"]) == {"sagemaker"}


def test_a_missing_run_env_is_a_warning(
    cli: Cli, checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environment = activated(checkout)
    (checkout / "run.env").unlink()
    enter(monkeypatch, environment)
    result = cli("plan", "--inventory", GTX_M40)
    assert result.code == 0, result.err
    assert f"drgpu: warning: no run settings file at {checkout / 'run.env'} (DR_CONFIG)" in (
        result.err
    )
    monkeypatch.delenv("DR_CONFIG")
    result = cli("plan", "--inventory", GTX_M40)
    assert result.code == 0, result.err
    assert "drgpu: warning: no run.env at" in result.err


def test_dr_dir_without_compose_files_is_an_error_not_drgpus_own_stack(
    cli: Cli, checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    enter(monkeypatch, {"DR_DIR": str(checkout)})
    result = cli("plan", "--inventory", GTX_M40)
    assert result.code == 2
    assert "DR_TRAIN_COMPOSE_FILE is not" in assert_one_error_line(result)


def test_outside_drfc_nothing_changes(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    enter(monkeypatch, {})
    Path("system.env").write_text("DR_SAGEMAKER_CUDA_DEVICES=GPU-6f0c\n")
    result = cli("plan", "--inventory", GTX_M40, "--json")
    assert result.code == 0 and result.err == ""
    assert set(json.loads(result.out)["services"]) == {"sagemaker", "robomaker"}


def test_issue_12_reproducer_an_unreadable_line_exits_2_naming_its_place(
    cli: Cli, tmp_path: Path
) -> None:
    env = tmp_path / "s.env"
    env.write_text('DR_SAGEMAKER_CUDA_DEVICES="1\n')
    result = cli("plan", "--env-file", env, "--inventory", GTX_M40)
    assert result.code == 2
    line = assert_one_error_line(result)
    assert line.startswith(f'drgpu: error: {env}:1: DR_SAGEMAKER_CUDA_DEVICES: an unmatched "')


def test_reader_warnings_use_drgpus_format(cli: Cli, tmp_path: Path) -> None:
    env = tmp_path / "s.env"
    env.write_text("DR_SAGEMAKER_CUDA_DEVICES=0 # the M40\n")
    result = cli("plan", "--env-file", env, "--inventory", GTX_M40)
    assert result.code == 0
    assert result.err.startswith(f"drgpu: warning: {env}:1: a comment after the value")


def test_status_eval_narrows_to_the_evaluation_of_the_activated_run(
    cli: Cli, checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from drgpu.commands import status
    from drgpu.core.model import Inventory

    seen: list[str | None] = []

    class Reader:
        def __init__(self, session: object, engine: object, run_id: str | None, *_: object) -> None:
            self.run_id = run_id

        def snapshot(self) -> object:
            from drgpu.core.gpu_usage import build_status

            seen.append(self.run_id)
            return build_status(Inventory(gpus=()), [], [], {}, self.run_id)

    class Session:
        def __enter__(self) -> object:
            return object()

        def __exit__(self, *args: object) -> None:
            return None

    enter(monkeypatch, activated(checkout))
    monkeypatch.setattr(status, "Reader", Reader)
    monkeypatch.setattr("drgpu.host.nvml.nvml_session", Session)
    monkeypatch.setattr("drgpu.host.docker_api.connected", Session)
    assert cli("status", "--eval", "--json").code == 0
    assert cli("status", "--eval", "--run-id", "3", "--json").code == 0
    assert cli("status", "--json").code == 0
    assert seen == ["eval-0", "eval-3", None]


@pytest.mark.parametrize(
    ("flags", "project"), [((), "deepracer-0"), (("--eval",), "deepracer-eval-0")]
)
def test_cuda_check_from_the_host_checks_the_activated_project(
    cli: Cli,
    checkout: Path,
    monkeypatch: pytest.MonkeyPatch,
    flags: tuple[str, ...],
    project: str,
) -> None:
    seen: list[str] = []

    def containers(name: str) -> list[object]:
        seen.append(name)
        return []

    enter(monkeypatch, activated(checkout))
    monkeypatch.setattr("drgpu.host.engine.project_containers", containers)
    monkeypatch.setattr("drgpu.host.swarm_engine.managed_tasks", lambda name: None)
    other = ContainerFacts("o", "o", "robomaker", "deepracer-7", "running", {"drgpu.run_id": "7"})
    monkeypatch.setattr("drgpu.host.engine.drgpu_containers", lambda: [other])
    result = cli("cuda-check", "--all", *flags)
    assert result.code == 5
    assert seen == [project]
    assert f"no containers of {project}" in result.err
    assert "hint: runs here: 7 (--run-id N)" in result.err  # another run is up


def test_a_bad_value_from_the_shell_says_it_came_from_the_environment(
    cli: Cli, checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    enter(monkeypatch, {**activated(checkout), "DR_WORKERS": "many"})
    system = (checkout / "system.env").read_text().replace("DR_WORKERS=1\n", "")
    (checkout / "system.env").write_text(system)
    result = cli("plan", "--inventory", GTX_M40)
    assert result.code == 2
    assert "drgpu: error: the environment: DR_WORKERS: 'many'" in assert_one_error_line(result)


def swarm_style(checkout: Path) -> None:
    """DRfC's default style: system.env no longer says compose."""
    system = (checkout / "system.env").read_text().replace("DR_DOCKER_STYLE=compose\n", "")
    (checkout / "system.env").write_text(system)


def test_drfc_env_in_swarm_style_appends_the_swarm_override_to_the_c_list(
    cli: Cli, checkout: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    swarm_style(checkout)
    system = (checkout / "system.env").read_text()
    (checkout / "system.env").write_text(
        system.replace("DR_SAGEMAKER_CUDA_DEVICES=1", "DR_SAGEMAKER_CUDA_DEVICES=none").replace(
            "DR_ROBOMAKER_CUDA_DEVICES=0", "DR_ROBOMAKER_CUDA_DEVICES=none"
        )
    )
    shell = activated(checkout)
    enter(monkeypatch, shell)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    result = cli("drfc-env")
    assert result.code == 0, result.err
    override = checkout / ".drgpu" / "deepracer-0.swarm-override.yml"
    files = f"{shell['DR_TRAIN_COMPOSE_FILE']} -c {override}"
    assert result.out == f"export DR_TRAIN_COMPOSE_FILE='{files}'\n"
    assert override.read_text().startswith("# Written by drgpu for swarm stack deepracer-0")


def test_up_in_swarm_style_without_an_engine_is_one_error_line(
    cli: Cli, checkout: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    swarm_style(checkout)
    enter(monkeypatch, activated(checkout))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    result = cli("up")
    assert result.code == 5
    assert "drgpu: warning: DR_DOCKER_STYLE=swarm" not in result.err
    assert_one_error_line(result)


def test_render_in_swarm_style_shows_the_override_drfcs_stack_deploy_merges(
    cli: Cli, checkout: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What `up` appends with -c to DRfC's own files, not drgpu's own complete stack."""
    import yaml

    swarm_style(checkout)
    set_values(
        checkout / "system.env", DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1"
    )
    enter(monkeypatch, activated(checkout))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    result = cli("render", "--inventory", GTX_M40)
    assert result.code == 0, result.err
    assert result.out.startswith("# Written by drgpu for swarm stack deepracer-0")
    services = yaml.safe_load(result.out)["services"]
    assert services["rl_coach"]["environment"]["CUDA_VISIBLE_DEVICES"] == M40
    assert services["rl_coach"]["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert "image" not in services["robomaker"]  # DRfC's files keep what they say


def test_an_evaluation_in_swarm_style_waits_for_one_simulator_whatever_dr_workers_says(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DRfC's evaluation stack runs one robomaker replica: `up --eval` waits for one."""
    from drgpu.commands import drfc_stack, swarm_deploy
    from drgpu.commands.options import resolved, settings
    from drgpu.commands.preparation import prepare_with
    from drgpu.core.inputs import InputOptions

    swarm_style(checkout)
    set_values(checkout / "system.env", DR_WORKERS="2", DR_ROBOMAKER_CUDA_DEVICES="0")
    enter(monkeypatch, activated(checkout))
    for evaluation, replicas in ((False, 2), (True, 1)):
        target = resolved(InputOptions(evaluation=evaluation))
        config = settings(target)
        prepared = prepare_with(config, drfc_stack.script_target(target, config), GTX_M40)
        services = drfc_stack.render_swarm(prepared, None).services
        assert [s.replicas for s in services if s.name == "robomaker"] == [replicas]
        # and `plan` says as much (before: DR_WORKERS replicas for an evaluation too)
        view = swarm_deploy.plan_view(prepared, this_host=False).services
        assert [s.replicas for s in view if s.name == "robomaker"] == [replicas]


def test_down_with_an_unreadable_setting_warns_and_stops_the_run_the_shell_names(
    cli: Cli, checkout: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shell = activated(checkout)
    set_values(checkout / "system.env", DRGPU_SHARNG="timeslice")  # a typo'd key, after
    enter(monkeypatch, shell)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    assert cli("up").code == 2  # up refuses it
    result = cli("down")
    assert result.code == 5, result.err  # on to DRfC's stop (here: no engine to stop it on)
    assert "drgpu: warning: " in result.err and "DRGPU_SHARNG: unknown drgpu setting" in result.err
    assert "down stops the run the shell names" in result.err


def test_down_refuses_only_when_it_cannot_tell_which_run(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    enter(monkeypatch, {})
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    env = tmp_path / "system.env"
    env.write_text("DR_RUN_ID=3\nDR_WORKERS=1=2\n")
    result = cli("down", "--env-file", env)
    assert result.code == 2
    line = assert_one_error_line(result)
    assert "down cannot tell which run to stop (runs up: unknown (" in line
    assert "hint: fix the settings, or name the run: DR_RUN_ID=<id> drgpu down" in result.err


def test_down_outside_drfc_stops_the_run_the_hint_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from drgpu.commands.down import identified
    from drgpu.commands.options import resolved
    from drgpu.errors import ConfigError

    enter(monkeypatch, {"DR_RUN_ID": "7"})  # `DR_RUN_ID=7 drgpu down`, no system.env here
    target = resolved(InputOptions(env_file=tmp_path / "system.env"))
    assert not target.drfc_settings
    config = identified(target, ConfigError("no settings file at system.env"))
    assert config.run_id == "7"  # before: 0, another run's stack


def test_in_a_drfc_shell_an_unchosen_order_is_refused_suggesting_drfcs_meaning_first(
    cli: Cli, checkout: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    enter(monkeypatch, activated(checkout))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    three = Path(__file__).parents[1] / "topologies" / "gtx1650-rtx3090-m40-orders.json"
    result = cli("render", "--inventory", three)
    assert result.code == 2
    assert "DR_SAGEMAKER_CUDA_DEVICES=1: nvidia-smi's GPU 1 is the NVIDIA GeForce RTX 3090" in (
        assert_one_error_line(result)
    )
    assert "hint: write DRGPU_INDEX_ORDER=cuda (DRfC's 'CUDA number') or =pci" in result.err


def test_down_outside_drfc_takes_a_swarm_stack_down_as_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from drgpu.commands import compose_run, down, swarm_deploy

    enter(monkeypatch, {"DR_RUN_ID": "7"})  # `DR_RUN_ID=7 drgpu down`, no --swarm, no system.env
    monkeypatch.setattr("drgpu.host.swarm_engine.stack_service_count", lambda name: 2)
    taken: list[tuple[str, str]] = []
    for module in (compose_run, swarm_deploy):
        monkeypatch.setattr(
            module, "down", lambda c, t, m=module: taken.append((m.__name__, c.project))
        )
    down.down(InputOptions(env_file=tmp_path / "system.env"), swarm=False)
    assert taken == [("drgpu.commands.swarm_deploy", "deepracer-7")]  # before: Compose's way
