"""The Swarm stack file: golden files, what each service reserves, and task verification."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from drgpu.core.compose_stack import base_stack_file, load_stack
from drgpu.core.facts import TaskFacts
from drgpu.core.model import Role
from drgpu.core.planning import make_plan
from drgpu.core.settings import load_config
from drgpu.core.swarm_node import GPU_KIND, SIMULATOR_CONSTRAINT, TRAINER_CONSTRAINT
from drgpu.core.topology import load_inventory
from drgpu.host.compose import resolve_stack
from drgpu.targets.swarm_stack import (
    SwarmStack,
    render_stack,
    swarm_services,
    verify_tasks,
    waiting_on,
)

REPO = Path(__file__).resolve().parents[2]
GTX_M40 = REPO / "examples" / "inventories" / "gtx1650-m40.json"
DRFC_TRAINING = REPO / "tests" / "golden" / "stacks" / "drfc-training.yml"
COMPOSE_ONLY_STACK = """\
services:
  sagemaker:
    image: trainer:1
    gpus: all
    pull_policy: never
    runtime: nvidia
    depends_on: [redis]
    ports: ["8080:8080"]
    deploy:
      resources:
        reservations:
          devices:
            - driver: nvidia
              count: all
              capabilities: [gpu]
  robomaker:
    image: sim:1
    deploy:
      placement:
        constraints: ["node.role == worker"]
  redis:
    image: redis:7
"""


def stack_for(scenario: str, tmp_path: Path) -> SwarmStack:
    """A scenario's stack file, read through the real Compose binary as `drgpu up` does."""
    env_file = tmp_path / "system.env"
    shutil.copyfile(REPO / "system.env.example", env_file)
    run_env = {"workers": "DR_WORKERS=3\n", "rl-coach": "", "compose-only": ""}[scenario]
    (tmp_path / "run.env").write_text(run_env + "DR_DOCKER_STYLE=swarm\n")
    files = [base_stack_file()]
    if scenario == "rl-coach":
        files = [DRFC_TRAINING]
    elif scenario == "compose-only":
        files = [tmp_path / "docker-compose.yml"]
        files[0].write_text(COMPOSE_ONLY_STACK)
    config = load_config(env_file)
    stack = load_stack(files)
    plan = make_plan(config, stack, load_inventory(GTX_M40))
    model = resolve_stack(config, stack.files)
    return render_stack(plan, model, swarm_services(plan, model["services"], config.workers))


def services_of(stack: SwarmStack) -> dict[str, Any]:
    services = yaml.safe_load(stack.text)["services"]
    assert isinstance(services, dict)
    return services


SCENARIOS = ["workers", "rl-coach", "compose-only"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_stack_file_matches_the_golden_file(
    scenario: str, tmp_path: Path, golden: ModuleType
) -> None:
    golden.assert_matches_golden(f"swarm-{scenario}.yml", stack_for(scenario, tmp_path).text)


def test_gpu_services_reserve_generic_resources_not_device_requests(tmp_path: Path) -> None:
    services = services_of(stack_for("compose-only", tmp_path))
    reservations = services["sagemaker"]["deploy"]["resources"]["reservations"]
    assert reservations == {
        "generic_resources": [{"discrete_resource_spec": {"kind": GPU_KIND, "value": 1}}]
    }
    assert "gpus" not in services["sagemaker"]
    assert "deploy" not in services["redis"]


def test_workers_are_replicas_each_reserving_one_workers_gpus(tmp_path: Path) -> None:
    robomaker = services_of(stack_for("workers", tmp_path))["robomaker"]
    assert robomaker["deploy"]["replicas"] == 3
    assert robomaker["deploy"]["placement"]["constraints"] == [SIMULATOR_CONSTRAINT]
    generic = robomaker["deploy"]["resources"]["reservations"]["generic_resources"]
    assert generic == [{"discrete_resource_spec": {"kind": GPU_KIND, "value": 1}}]


def test_gpu_services_fail_closed_and_count_cuda_devices_from_zero(tmp_path: Path) -> None:
    sagemaker = services_of(stack_for("workers", tmp_path))["sagemaker"]
    assert sagemaker["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert sagemaker["environment"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert sagemaker["environment"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert sagemaker["deploy"]["placement"]["constraints"] == [TRAINER_CONSTRAINT]


def test_user_constraints_are_kept_and_compose_only_keys_left_out(tmp_path: Path) -> None:
    stack = stack_for("compose-only", tmp_path)
    services = services_of(stack)
    assert services["robomaker"]["deploy"]["placement"]["constraints"] == [
        "node.role == worker",
        SIMULATOR_CONSTRAINT,
    ]
    assert services["sagemaker"]["depends_on"] == ["redis"]
    assert services["sagemaker"]["ports"][0]["published"] == 8080
    assert stack.warnings == ("swarm has no pull_policy, runtime: left out of service sagemaker",)


def test_rl_coach_runs_beside_the_trainer_without_a_reservation(tmp_path: Path) -> None:
    rl_coach = services_of(stack_for("rl-coach", tmp_path))["rl_coach"]
    assert rl_coach["deploy"] == {"placement": {"constraints": [TRAINER_CONSTRAINT]}}
    assert rl_coach["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"


def task(service: str, slot: int, gpus: tuple[str, ...], **extra: Any) -> TaskFacts:
    values: dict[str, Any] = {
        "id": f"{service}{slot}",
        "service": f"deepracer-0_{service}",
        "slot": slot,
        "node_id": "node1",
        "state": "running",
        "desired_state": "running",
        "error": "",
        "environment": {},
        "generic_resources": tuple((GPU_KIND, uuid) for uuid in gpus),
    }
    values.update(extra)
    return TaskFacts(**values)


@pytest.fixture
def small_stack(tmp_path: Path) -> SwarmStack:
    stack = stack_for("workers", tmp_path)
    return SwarmStack(
        project="deepracer-0",
        text=stack.text,
        services=tuple(
            type(service)(
                name=service.name,
                role=service.role,
                gpus=service.gpus,
                replicas=2 if service.role is Role.SIMULATOR else None,
                environment=(),
                labels=service.labels,
                constraint=service.constraint,
            )
            for service in stack.services
        ),
        warnings=(),
    )


def test_tasks_that_match_pass(small_stack: SwarmStack) -> None:
    tasks = [task("sagemaker", 1, ("GPU-a",)), task("robomaker", 1, ("GPU-b",))]
    tasks.append(task("robomaker", 2, ("GPU-c",)))
    assert verify_tasks(small_stack, tasks) == []
    assert waiting_on(small_stack, tasks) == ([], [])


def test_a_gpu_given_to_two_tasks_is_found(small_stack: SwarmStack) -> None:
    tasks = [task("sagemaker", 1, ("GPU-a",)), task("robomaker", 1, ("GPU-a",))]
    problems = verify_tasks(small_stack, tasks)
    assert problems == ["GPU GPU-a of node node1 is given to sagemaker.1 and robomaker.1"]


def test_a_task_without_its_gpu_is_found(small_stack: SwarmStack) -> None:
    problems = verify_tasks(small_stack, [task("sagemaker", 1, ())])
    assert problems == [f"sagemaker.1 holds 0 {GPU_KIND}, planned 1"]


def test_a_pending_task_without_a_node_is_stuck(small_stack: SwarmStack) -> None:
    error = "no suitable node (insufficient resources on 1 node)"
    tasks = [task("sagemaker", 1, ("GPU-a",)), task("robomaker", 1, ("GPU-b",))]
    tasks.append(task("robomaker", 2, (), state="pending", error=error))
    waiting, stuck = waiting_on(small_stack, tasks)
    assert waiting == ["robomaker: 1/2 running"]
    assert stuck == [f"robomaker: {error}"]


def test_the_docker_style_setting_picks_the_swarm_rendering(tmp_path: Path) -> None:
    from drgpu.cli import main

    env_file = tmp_path / "system.env"
    env_file.write_text(
        textwrap.dedent(
            """\
            DR_DOCKER_STYLE=swarm
            DR_SAGEMAKER_CUDA_DEVICES=0
            DR_ROBOMAKER_CUDA_DEVICES=1
            """
        )
    )
    output = tmp_path / "stack.yml"
    with pytest.raises(SystemExit) as done:
        main(
            ["render", "--env-file", str(env_file), "--inventory", str(GTX_M40), "-o", str(output)]
        )
    assert done.value.code == 0
    assert output.read_text().startswith("# Written by drgpu for swarm stack deepracer-0")
