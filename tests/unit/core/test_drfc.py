"""DRfC mode, pure: the checkout an activated shell describes, and the target of a command."""

from __future__ import annotations

from pathlib import Path

import pytest

from drgpu.core.inputs import (
    DEFAULT_ENV_FILE,
    InputOptions,
    activation_exports,
    drfc_checkout,
    resolve_inputs,
    split_file_list,
)
from drgpu.errors import ConfigError

ROOT = Path("/home/racer/deepracer-for-cloud")
ACTIVATED = {
    "DR_DIR": str(ROOT),
    "DR_CONFIG": f"{ROOT}/run-1.env",
    "DR_DOCKER_FILE_SEP": "-c",
    "DR_TRAIN_COMPOSE_FILE": f"-c {ROOT}/docker/docker-compose-training.yml"
    f" -c {ROOT}/docker/docker-compose-training-swarm.yml",
    "DR_EVAL_COMPOSE_FILE": f"-c {ROOT}/docker/docker-compose-eval.yml",
}


def test_no_dr_dir_is_no_checkout() -> None:
    assert drfc_checkout({"DR_TRAIN_COMPOSE_FILE": "-f a.yml"}, evaluation=False) is None


def test_an_activated_shell_names_its_files_and_scripts() -> None:
    checkout = drfc_checkout(ACTIVATED, evaluation=False)
    assert checkout is not None
    assert checkout.run_env == ROOT / "run-1.env"
    assert checkout.file_flag == "-c"
    assert checkout.compose_files == (
        ROOT / "docker/docker-compose-training.yml",
        ROOT / "docker/docker-compose-training-swarm.yml",
    )
    assert checkout.start_script == ROOT / "scripts/training/start.sh"
    assert checkout.stop_script == ROOT / "scripts/training/stop.sh"


def test_evaluation_takes_the_eval_list_and_scripts() -> None:
    checkout = drfc_checkout(ACTIVATED, evaluation=True)
    assert checkout is not None and checkout.evaluation
    assert checkout.compose_files == (ROOT / "docker/docker-compose-eval.yml",)
    assert checkout.start_script == ROOT / "scripts/evaluation/start.sh"
    assert checkout.stop_script == ROOT / "scripts/evaluation/stop.sh"


@pytest.mark.parametrize(
    ("text", "files", "flag"),
    [
        ("-f a.yml -f b.yml", ("a.yml", "b.yml"), "-f"),
        ("  -c a.yml   -c b.yml ", ("a.yml", "b.yml"), "-c"),
        ("--file a.yml --compose-file b.yml", ("a.yml", "b.yml"), "-f"),
        ("", (), None),
    ],
)
def test_compose_file_lists_in_both_forms(
    text: str, files: tuple[str, ...], flag: str | None
) -> None:
    assert split_file_list(text, "V") == (tuple(Path(f) for f in files), flag)


@pytest.mark.parametrize("text", ["a.yml", "-f", "-f a.yml b.yml", "-x a.yml"])
def test_a_list_that_is_not_one_is_an_error(text: str) -> None:
    with pytest.raises(ConfigError, match="DR_TRAIN_COMPOSE_FILE is not a list of compose files"):
        split_file_list(text, "DR_TRAIN_COMPOSE_FILE")


def test_activation_exports_what_dr_update_env_derives() -> None:
    assert activation_exports({"DR_DOCKER_STYLE": "swarm", "DR_RUN_ID": "2"}) == {
        "DR_RUN_ID": "2",
        "AWS_DEFAULT_REGION": "",
        "DR_ROBOMAKER_TRAIN_PORT": "8082",
        "DR_ROBOMAKER_EVAL_PORT": "8182",
        "DR_ROBOMAKER_GUI_PORT": "5902",
    }
    compose = activation_exports({"DR_DOCKER_STYLE": "compose", "DR_AWS_APP_REGION": "eu-1"})
    assert compose["DR_RUN_ID"] == "0"
    assert compose["AWS_DEFAULT_REGION"] == "eu-1"
    assert compose["DR_ROBOMAKER_GUI_PORT"] == "5901-5920"


def test_outside_drfc_the_defaults_stand() -> None:
    target = resolve_inputs(InputOptions(), {})
    assert (target.env_file, target.run_env, target.compose_files) == (
        DEFAULT_ENV_FILE,
        None,
        None,
    )
    assert target.checkout is None and not target.drfc_settings


def test_in_drfc_the_checkout_fills_what_no_flag_says() -> None:
    target = resolve_inputs(InputOptions(evaluation=True), ACTIVATED)
    assert target.env_file == ROOT / "system.env"
    assert target.run_env == ROOT / "run-1.env"
    assert target.compose_files == (ROOT / "docker/docker-compose-eval.yml",)
    assert target.evaluation and target.checkout is not None and target.drfc_settings


def test_flags_win_part_by_part() -> None:
    target = resolve_inputs(
        InputOptions(env_file=Path("mine.env"), compose_files=(Path("x.yml"),)), ACTIVATED
    )
    assert (target.env_file, target.run_env, target.compose_files) == (
        Path("mine.env"),
        None,
        (Path("x.yml"),),
    )
    assert target.checkout is not None and not target.drfc_settings


def test_a_command_without_compose_files_does_not_need_the_list() -> None:
    environ = {"DR_DIR": str(ROOT)}
    with pytest.raises(ConfigError, match="but DR_TRAIN_COMPOSE_FILE is not"):
        resolve_inputs(InputOptions(), environ)
    target = resolve_inputs(InputOptions(needs_files=False), environ)
    assert target.env_file == ROOT / "system.env"


def test_drgpus_own_override_in_the_list_is_not_the_users() -> None:
    own = f"-c {ROOT}/.drgpu/deepracer-0.swarm-override.yml"  # `eval "$(drgpu drfc-env)"`
    listed = f"{ACTIVATED['DR_TRAIN_COMPOSE_FILE']} {own}"
    checkout = drfc_checkout({**ACTIVATED, "DR_TRAIN_COMPOSE_FILE": listed}, evaluation=False)
    assert checkout is not None
    assert checkout.compose_files == (
        ROOT / "docker/docker-compose-training.yml",
        ROOT / "docker/docker-compose-training-swarm.yml",
    )
