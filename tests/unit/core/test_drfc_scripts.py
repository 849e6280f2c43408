"""How drgpu runs DeepRacer-for-cloud's start and stop scripts with its override."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from drgpu.core import drfc_scripts
from drgpu.core.compose_stack import Stack
from drgpu.core.facts import ContainerFacts, EngineFacts, NodeFacts
from drgpu.core.inputs import DrfcCheckout
from drgpu.core.model import Inventory
from drgpu.core.planning import make_plan
from drgpu.core.settings import Config, config_from_values, training_run
from drgpu.host.files import base_stack_file, load_stack, override_header_template
from drgpu.targets.compose_override import render_override

ROOT = Path("/home/me/deepracer-for-cloud")
TRAINING = (ROOT / "docker/docker-compose-training.yml", ROOT / "docker/docker-compose-keys.yml")


@pytest.fixture
def base_stack() -> Stack:
    return load_stack([base_stack_file()])


def checkout(*, evaluation: bool = False) -> DrfcCheckout:
    return DrfcCheckout(
        root=ROOT,
        run_env=ROOT / "run.env",
        evaluation=evaluation,
        compose_files=TRAINING,
        file_flag="-f",
    )


def test_start_files_add_what_drfcs_start_script_adds_in_its_order() -> None:
    def files(evaluation: bool = False, **values: str) -> tuple[Path, ...]:
        config = config_from_values(values, {}, evaluation=evaluation)
        return drfc_scripts.start_files(checkout(evaluation=evaluation), config)

    assert files(DR_WORKERS="1") == TRAINING
    assert files(DR_WORKERS="3", DR_ROBOMAKER_MOUNT_LOGS="True") == (
        *TRAINING,
        ROOT / "docker/docker-compose-mount.yml",
        ROOT / "docker/docker-compose-robomaker-multi.yml",
    )
    assert files(DR_WORKERS="3", DR_DOCKER_STYLE="swarm") == TRAINING
    assert files(True, DR_WORKERS="3") == TRAINING


def test_the_script_reads_drgpus_override_last_and_removes_orphans() -> None:
    override = ROOT / ".drgpu/deepracer-0.override.yml"
    environment = drfc_scripts.script_environment({"DR_WORKERS": "3"}, checkout(), override)
    assert environment["DR_TRAIN_COMPOSE_FILE"] == (
        f"-f {TRAINING[0]} -f {TRAINING[1]} -f {override}"
    )
    assert environment["DR_WORKERS"] == "3"  # read again, as dr-start-training does
    assert environment["COMPOSE_REMOVE_ORPHANS"] == "1"
    assert drfc_scripts.start_command(checkout(), ["-w"]) == [
        "bash",
        str(ROOT / "scripts/training/start.sh"),
        "-q",
        "-w",
    ]
    exports = drfc_scripts.shell_exports(checkout(evaluation=True), override)
    first, second = exports.splitlines()
    assert shlex.split(first) == [
        "export",
        f"DR_EVAL_COMPOSE_FILE=-f {TRAINING[0]} -f {TRAINING[1]} -f {override}",
    ]
    assert second == "export COMPOSE_REMOVE_ORPHANS=1"


def test_with_workers_robomaker_becomes_a_placeholder_drfcs_scale_may_multiply(
    make_config: Callable[..., Config], base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_WORKERS="2", DR_ROBOMAKER_CUDA_DEVICES="0,1")
    plan = drfc_scripts.for_start_script(make_plan(config, base_stack, gtx_m40), checkout())

    robomaker = plan.service("robomaker")
    assert robomaker.placeholder and robomaker.replicas is None and not robomaker.devices
    assert [s.name for s in plan.services if s.name.startswith("robomaker-")] == [
        "robomaker-1",
        "robomaker-2",
    ]
    rendered = render_override(plan, override_header_template())
    assert (
        "    entrypoint: !override\n    - 'true'\n    command: !reset []\n    ports: !reset []\n"
        in (rendered)
    )
    body = yaml.safe_load(
        rendered.split("---\n")[-1].replace("!override", "").replace("!reset", "")
    )
    assert "scale" not in body["services"]["robomaker"]
    assert body["services"]["robomaker"]["environment"] == {"NVIDIA_VISIBLE_DEVICES": "void"}


def test_evaluation_and_single_workers_are_left_as_planned(
    make_config: Callable[..., Config], base_stack: Stack, gtx_m40: Inventory
) -> None:
    one = make_plan(make_config(DR_WORKERS="1"), base_stack, gtx_m40)
    assert drfc_scripts.for_start_script(one, checkout()) == one
    two = make_plan(make_config(DR_WORKERS="2"), base_stack, gtx_m40)
    assert drfc_scripts.for_start_script(two, checkout(evaluation=True)) == two


def test_the_fixture_checkout_defines_what_drfcs_start_script_needs() -> None:
    fixture = Path(__file__).resolve().parents[2] / "drfc" / "checkout" / "docker"
    stack = load_stack([fixture / "docker-compose-training.yml"])
    assert [s.name for s in stack.services] == ["rl_coach", "robomaker"]


def test_an_evaluation_plans_no_trainer_gpu_and_one_simulator(
    base_stack: Stack, gtx_m40: Inventory
) -> None:
    values = {
        "DR_SAGEMAKER_CUDA_DEVICES": "0",
        "DR_ROBOMAKER_CUDA_DEVICES": "1",
        "DR_WORKERS": "3",
    }
    plan = make_plan(config_from_values(values, {}, evaluation=True), base_stack, gtx_m40)
    assert [s.name for s in plan.services] == ["sagemaker", "robomaker"]
    assert not plan.service("sagemaker").devices
    assert len(plan.service("robomaker").devices) == 1
    assert "evaluation: no trainer, DR_SAGEMAKER_CUDA_DEVICES is not used" in plan.explanations


def test_an_evaluations_rl_coach_is_not_said_to_start_a_trainer(gtx_m40: Inventory) -> None:
    fixture = Path(__file__).resolve().parents[2] / "drfc" / "checkout" / "docker"
    stack = load_stack([fixture / "docker-compose-training.yml"])
    values = {"DR_SAGEMAKER_CUDA_DEVICES": "0", "DR_ROBOMAKER_CUDA_DEVICES": "1"}
    evaluation = make_plan(config_from_values(values, {}, evaluation=True), stack, gtx_m40)
    note = evaluation.service("rl_coach").note
    assert note == "evaluation: starts no trainer; rl_coach gets no GPU"
    training = make_plan(config_from_values(values, {}), stack, gtx_m40).service("rl_coach")
    assert training.note and training.note.startswith("starts the trainer through SageMaker")


def swarm_checkout(*, evaluation: bool = False) -> DrfcCheckout:
    return DrfcCheckout(
        root=ROOT,
        run_env=ROOT / "run.env",
        evaluation=evaluation,
        compose_files=(ROOT / "docker/docker-compose-training.yml",),
        file_flag="-c",
    )


def test_swarm_exports_append_the_override_to_the_c_list_without_orphans() -> None:
    override = ROOT / ".drgpu/deepracer-0.swarm-override.yml"
    exports = drfc_scripts.shell_exports(swarm_checkout(), override, swarm=True)
    assert exports == (
        f"export DR_TRAIN_COMPOSE_FILE='-c {ROOT}/docker/docker-compose-training.yml"
        f" -c {override}'\n"
    )


def swarm(**labels: str) -> EngineFacts:
    """A one-node swarm (n1) with these labels, or (none) this engine on a worker node."""
    node = NodeFacts("n1", "host", "manager", "ready", labels)
    return EngineFacts("27.0", "runc", ("runc",), node_id="n1", nodes=(node,) if labels else ())


def test_swarm_preflight_names_jq_and_each_missing_label_with_its_fix() -> None:
    labelled = swarm(Sagemaker="true", Robomaker="true")
    assert drfc_scripts.swarm_preflight(swarm_checkout(), labelled, jq_found=True) == []
    problems = drfc_scripts.swarm_preflight(
        swarm_checkout(), swarm(Sagemaker="false"), jq_found=False
    )
    assert [fix for _, fix in problems] == [
        "sudo apt-get install jq (or your distribution's jq package)",
        "docker node update --label-add Robomaker=true n1",
        "docker node update --label-add Sagemaker=true n1",
    ]
    # An evaluation's start checks no label (DRfC's does not); a worker node sees none.
    assert (
        drfc_scripts.swarm_preflight(swarm_checkout(evaluation=True), swarm(), jq_found=True) == []
    )
    (problem,) = drfc_scripts.swarm_preflight(swarm_checkout(), swarm(), jq_found=True)
    assert problem[0].startswith("this engine is no swarm manager")


def test_swarm_preflight_wants_sagemaker_on_this_node_not_on_another() -> None:
    """drgpu pins rl_coach to this node: a Sagemaker label on a worker alone leaves it
    no node."""
    labelled = swarm(Robomaker="true")
    worker = NodeFacts("n2", "host", "worker", "ready", {"Sagemaker": "true"})
    facts = replace(labelled, nodes=(*labelled.nodes, worker))
    [(why, fix)] = drfc_scripts.swarm_preflight(swarm_checkout(), facts, jq_found=True)
    assert why.startswith("this node is not labelled Sagemaker=true")
    assert fix == "docker node update --label-add Sagemaker=true n1"


RUN_0 = config_from_values({"DR_LOCAL_S3_MODEL_PREFIX": "rl-deepracer-sagemaker"}, {})


def trainer(name: str, state: str = "running", **environment: str) -> ContainerFacts:
    service = name.split("-", 1)[1].rsplit("-", 1)[0] if "algo-" in name else name
    return ContainerFacts(
        id=name, name=name, service=service, project="tmpx", state=state, environment=environment
    )


def test_the_runs_trainers_running_or_only_created_are_found() -> None:
    ours = trainer("tmpab12-algo-1-x9k2z-1", RUN_ID="0", MODEL_S3_PREFIX="rl-deepracer-sagemaker")
    created = trainer("tmpcd34-algo-1-q1w2e-1", state="created", RUN_ID="0")
    assert drfc_scripts.run_trainers(
        [ours, created], RUN_0.run_id, RUN_0.values.get("DR_LOCAL_S3_MODEL_PREFIX")
    ) == [ours, created]


def test_another_runs_model_or_a_look_alike_is_left_alone() -> None:
    other_run = trainer("tmpab12-algo-1-x9k2z-1", RUN_ID="1")
    other_model = trainer("tmpcd34-algo-1-q1w2e-1", RUN_ID="0", MODEL_S3_PREFIX="someone-else")
    look_alike = trainer("redis", RUN_ID="0")
    no_run = trainer("tmpef56-algo-2-r4t5y-1")
    found = drfc_scripts.run_trainers(
        [other_run, other_model, look_alike, no_run],
        RUN_0.run_id,
        RUN_0.values.get("DR_LOCAL_S3_MODEL_PREFIX"),
    )
    assert found == []


def test_a_training_project_names_its_run_an_evaluation_none() -> None:
    assert [training_run(p) for p in ("deepracer-0", "deepracer-eval-0", "web-0")] == [
        "0",
        None,
        None,
    ]
