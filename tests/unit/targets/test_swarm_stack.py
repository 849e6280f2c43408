"""The Swarm stack file: golden files, what each service reserves, and task verification."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from drgpu.core.facts import ContainerFacts, EngineFacts, NodeFacts, TaskFacts
from drgpu.core.inputs import Inputs
from drgpu.core.planning import make_plan
from drgpu.core.service_gpus import ONE_NODE, SwarmStack
from drgpu.core.swarm_node import (
    GPU_KIND,
    RESOURCE_VARIABLE,
    SIMULATOR_CONSTRAINT,
    TRAINER_CONSTRAINT,
    SwarmLayout,
)
from drgpu.core.verification import (
    check_node,
    exposed_gpus,
    short_of_gpus,
    stuck_hint,
    verify_tasks,
    waiting_on,
)
from drgpu.errors import GpuValidationError
from drgpu.host.compose import resolve_stack
from drgpu.host.files import base_stack_file, load_inventory, load_stack, read_settings
from drgpu.targets.compose_override import compose_text
from drgpu.targets.swarm_stack import (
    render_stack,
    slot_template,
    swarm_services,
    template_text,
)

REPO = Path(__file__).resolve().parents[3]
# gtx1650-m40.json in NVML (PCI) order: index 0 is the GTX (04:00.0), 1 the M40 (81:00.0).
M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"
GTX = "GPU-3b1d9c52-7a4e-4f0b-8c6d-2e9f1a7b5c30"
VARIABLE = RESOURCE_VARIABLE
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


def stack_for(scenario: str, tmp_path: Path, layout: SwarmLayout = ONE_NODE) -> SwarmStack:
    """A scenario's stack file, read through the real Compose binary as `drgpu up` does."""
    env_file = tmp_path / "system.env"
    shutil.copyfile(REPO / "system.env.example", env_file)
    run_env = {
        "workers": "DR_WORKERS=3\nDR_ROBOMAKER_CUDA_DEVICES=1,0\nDR_SAGEMAKER_CUDA_DEVICES=\n",
        "workers-generic": "DR_WORKERS=3\n",
        "rl-coach": "",
        "compose-only": "",
    }[scenario]
    (tmp_path / "run.env").write_text(run_env + "DR_DOCKER_STYLE=swarm\n")
    files = [base_stack_file()]
    if scenario == "rl-coach":
        files = [DRFC_TRAINING]
    elif scenario == "compose-only":
        files = [tmp_path / "docker-compose.yml"]
        files[0].write_text(COMPOSE_ONLY_STACK)
    config = read_settings(Inputs(env_file))
    stack = load_stack(files)
    plan = make_plan(config, stack, load_inventory(GTX_M40))
    model = resolve_stack(config, stack.files)
    services = swarm_services(plan, model["services"], config.workers, layout)
    return render_stack(plan, model, services, layout)


def services_of(stack: SwarmStack) -> dict[str, Any]:
    services = yaml.safe_load(stack.text)["services"]
    assert isinstance(services, dict)
    return services


GENERIC = SwarmLayout(pin_simulators=False, node_id="node1")
SCENARIOS = {
    "workers": ONE_NODE,
    "workers-generic": GENERIC,
    "rl-coach": ONE_NODE,
    "compose-only": ONE_NODE,
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_stack_file_matches_the_golden_file(
    scenario: str, tmp_path: Path, golden: ModuleType
) -> None:
    stack = stack_for(scenario, tmp_path, SCENARIOS[scenario])
    golden.assert_matches_golden(f"swarm-{scenario}.yml", stack.text)


def test_gpu_services_are_pinned_by_uuid_not_reserving(tmp_path: Path) -> None:
    services = services_of(stack_for("compose-only", tmp_path))
    assert (
        "deploy" not in services["sagemaker"] or "resources" not in services["sagemaker"]["deploy"]
    )
    assert services["sagemaker"]["environment"]["NVIDIA_VISIBLE_DEVICES"] == M40
    assert services["sagemaker"]["environment"]["CUDA_VISIBLE_DEVICES"] == M40
    assert services["sagemaker"]["labels"]["drgpu.gpus"] == M40
    assert "gpus" not in services["sagemaker"]
    assert "deploy" not in services["redis"]


def test_workers_are_replicas_each_pinned_to_its_workers_gpu_by_slot(tmp_path: Path) -> None:
    robomaker = services_of(stack_for("workers", tmp_path))["robomaker"]
    assert robomaker["deploy"]["replicas"] == 3
    assert robomaker["deploy"]["placement"]["constraints"] == [SIMULATOR_CONSTRAINT]
    assert "resources" not in robomaker["deploy"]
    template = (
        f'{{{{if eq .Task.Slot "1"}}}}{M40}{{{{else if eq .Task.Slot "2"}}}}{GTX}'
        f'{{{{else if eq .Task.Slot "3"}}}}{M40}{{{{else}}}}void{{{{end}}}}'
    )
    assert robomaker["environment"]["NVIDIA_VISIBLE_DEVICES"] == template
    assert robomaker["labels"]["drgpu.gpus_by_slot"] == f"1={M40};2={GTX};3={M40}"


def test_generic_simulators_reserve_and_fail_closed(tmp_path: Path) -> None:
    services = services_of(stack_for("workers-generic", tmp_path, GENERIC))
    robomaker = services["robomaker"]
    generic = robomaker["deploy"]["resources"]["reservations"]["generic_resources"]
    assert generic == [{"discrete_resource_spec": {"kind": GPU_KIND, "value": 1}}]
    assert robomaker["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert robomaker["environment"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert robomaker["deploy"]["placement"]["constraints"] == [SIMULATOR_CONSTRAINT]
    sagemaker = services["sagemaker"]
    assert sagemaker["environment"]["NVIDIA_VISIBLE_DEVICES"] == M40
    assert sagemaker["deploy"]["placement"]["constraints"] == [
        TRAINER_CONSTRAINT,
        "node.id == node1",
    ]


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


def test_rl_coach_forwards_the_trainers_uuid_and_gets_no_gpu(tmp_path: Path) -> None:
    rl_coach = services_of(stack_for("rl-coach", tmp_path))["rl_coach"]
    assert rl_coach["deploy"] == {"placement": {"constraints": [TRAINER_CONSTRAINT]}}
    assert rl_coach["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert rl_coach["environment"]["CUDA_VISIBLE_DEVICES"] == M40
    assert rl_coach["labels"]["drgpu.forwarded_gpus"] == M40


def test_secrets_are_masked_when_shown_and_kept_in_the_file(tmp_path: Path) -> None:
    (tmp_path / "docker-compose.yml").write_text(
        "services:\n  sagemaker:\n    image: t:1\n    environment:\n"
        "      AWS_SECRET_ACCESS_KEY: s3cr3t\n      RUN_ID: '1'\n"
    )
    env_file = tmp_path / "system.env"
    env_file.write_text("DR_SAGEMAKER_CUDA_DEVICES=1\nDR_ROBOMAKER_CUDA_DEVICES=\n")
    config = read_settings(Inputs(env_file))
    stack = load_stack([tmp_path / "docker-compose.yml"])
    plan = make_plan(config, stack, load_inventory(GTX_M40))
    model = resolve_stack(config, stack.files)
    rendered = render_stack(plan, model, swarm_services(plan, model["services"], 1))
    assert "s3cr3t" in rendered.text
    assert "s3cr3t" not in rendered.shown_text
    assert "AWS_SECRET_ACCESS_KEY: '****'" in rendered.shown_text


def test_the_node_advertising_a_pinned_gpu_is_refused_for_generic_simulators(
    tmp_path: Path,
) -> None:
    layout = SwarmLayout(pin_simulators=False, node_id="node1", advertised=(GTX, M40))
    stack = stack_for("workers-generic", tmp_path, layout)
    assert exposed_gpus(stack.services, layout) == [
        f"GPU {M40}, pinned for sagemaker, is advertised to Swarm by this node"
        f" ({GPU_KIND}={M40}): the engine may give it to a simulator"
    ]
    assert exposed_gpus(stack.services, replace(layout, advertised=(GTX,))) == []


def task(service: str, slot: int, gpus: tuple[str, ...] = (), **extra: Any) -> TaskFacts:
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


def container(task_id: str, **environment: str) -> ContainerFacts:
    return ContainerFacts(
        id=f"c-{task_id}",
        name=task_id,
        service="",
        project="",
        state="running",
        environment=environment,
    )


@pytest.fixture
def pinned(tmp_path: Path) -> SwarmStack:
    """No trainer GPU; three workers on 0,1 spread by slot: M40, GTX, M40."""
    return stack_for("workers", tmp_path, SwarmLayout(node_id="node1"))


def matching(stack: SwarmStack) -> tuple[list[TaskFacts], dict[str, ContainerFacts]]:
    tasks, containers = [], {}
    for service in stack.services:
        for slot in range(1, (service.replicas or 1) + 1):
            found = task(service.name, slot)
            tasks.append(found)
            containers[found.id] = container(found.id, **service.environment_for(slot))
    return tasks, containers


def test_tasks_that_got_their_pinned_gpus_pass(pinned: SwarmStack) -> None:
    tasks, containers = matching(pinned)
    assert verify_tasks(pinned, tasks, containers) == []
    assert waiting_on(pinned, tasks) == ([], [])


def test_a_task_given_another_gpu_than_planned_is_found(pinned: SwarmStack) -> None:
    tasks, containers = matching(pinned)
    environment = dict(containers["robomaker2"].environment, NVIDIA_VISIBLE_DEVICES=M40)
    containers["robomaker2"] = container("robomaker2", **environment)
    problems = verify_tasks(pinned, tasks, containers)
    assert f"robomaker.2: NVIDIA_VISIBLE_DEVICES={M40!r}, planned {GTX!r}" in problems


def test_a_pinned_task_the_engine_also_gave_a_gpu_is_found(pinned: SwarmStack) -> None:
    tasks, containers = matching(pinned)
    tasks[-1] = task("robomaker", 3, (M40,))
    environment = dict(containers["robomaker3"].environment, **{VARIABLE: M40})
    containers["robomaker3"] = container("robomaker3", **environment)
    problems = verify_tasks(pinned, tasks, containers)
    assert any(p.startswith("robomaker.3: holds NVIDIA-GPU") for p in problems)
    assert any("which the NVIDIA runtime prefers" in p for p in problems)


def test_a_pinned_task_on_another_node_or_without_container_is_found(pinned: SwarmStack) -> None:
    tasks, containers = matching(pinned)
    assert [t.id for t in tasks[1:3]] == ["robomaker1", "robomaker2"]
    tasks[1] = replace(tasks[1], node_id="node2")
    del containers[tasks[2].id]
    problems = verify_tasks(pinned, tasks, containers)
    assert problems[0].endswith("runs on node node2, pinned to node node1")
    assert "no container of it on this node" in problems[1]


@pytest.fixture
def generic(tmp_path: Path) -> SwarmStack:
    return stack_for("workers-generic", tmp_path, GENERIC)


def test_a_reserving_task_given_the_trainers_gpu_is_found(generic: SwarmStack) -> None:
    tasks = [task("sagemaker", 1), task("robomaker", 1, (GTX,)), task("robomaker", 2, (M40,))]
    tasks.append(task("robomaker", 3, ("GPU-spare",)))
    containers = {
        "sagemaker1": container("sagemaker1", **generic.services[0].environment_for(1)),
    }
    problems = verify_tasks(generic, tasks, containers)
    assert f"robomaker.2 was given GPU {M40}, pinned for sagemaker" in problems
    assert f"GPU {M40} of node node1 is given to sagemaker.1 and robomaker.2" in problems


def test_a_reserving_task_without_its_gpu_is_found(generic: SwarmStack) -> None:
    problems = verify_tasks(generic, [task("robomaker", 1, ())], {})
    assert f"robomaker.1: holds 0 {GPU_KIND}, planned 1" in problems


def test_a_pending_task_without_a_node_is_stuck(generic: SwarmStack) -> None:
    error = "no suitable node (insufficient resources on 1 node)"
    tasks = [task("sagemaker", 1), task("robomaker", 1, (GTX,))]
    tasks.append(task("robomaker", 2, (), state="pending", error=error))
    waiting, stuck = waiting_on(generic, tasks)
    assert waiting == ["robomaker: 1/3 running"]
    assert stuck == [f"robomaker: {error}"]


def _literal_text(template: str) -> str:
    """A Go template's literal text, its actions left out (`{{...}}`, as Go's lexer)."""
    return re.sub(r"\{\{.*?\}\}", "", template)


@pytest.mark.parametrize("uuid", ["}}{{", "{{.Node.Hostname}}", "a{b", "{", "GPU-{{{x"])
def test_a_slot_template_writes_braces_of_a_uuid_as_text_never_as_actions(uuid: str) -> None:
    template = slot_template(((uuid,), ("GPU-b",)))
    assert "{" not in _literal_text(template)
    assert template.startswith('{{if eq .Task.Slot "1"}}')
    assert template.endswith("{{else}}void{{end}}")
    assert template_text(uuid).replace('{{"{"}}', "{") == uuid


def test_a_stack_file_writes_each_dollar_as_compose_reads_one() -> None:
    assert compose_text({"a": ["$HOME", "${X}"], "b": 1, "c": {"d": "$$"}}) == {
        "a": ["$$HOME", "$${X}"],
        "b": 1,
        "c": {"d": "$$$$"},
    }


def test_a_service_without_gpus_may_end_well_a_gpu_service_may_not(pinned: SwarmStack) -> None:
    tasks, _containers = matching(pinned)
    ended = [
        replace(t, state="complete", desired_state="shutdown") if t.id == "redis1" else t
        for t in tasks
    ]
    assert waiting_on(pinned, ended) == ([], [])
    stopped = [
        replace(t, state="complete", desired_state="shutdown") if t.id == "robomaker2" else t
        for t in tasks
    ]
    waiting, stuck = waiting_on(pinned, stopped)
    assert waiting == ["robomaker: 2/3 running"]
    assert stuck == ["robomaker: task complete: its command ended"]  # nothing replaces it
    again = task("robomaker", 2, id="robomaker2b", state="pending", desired_state="ready")
    assert waiting_on(pinned, [*stopped, again])[1] == []  # the engine starts another


def test_a_slot_rejected_by_the_constraint_race_is_stuck_with_its_hint(
    pinned: SwarmStack,
) -> None:
    """DRfC's restart condition none leaves a slot Docker 20.10 rejected empty for good,
    while the other replicas run: said at once, not after the start timeout."""
    race = "assigned node no longer meets constraints"
    tasks = [
        replace(t, state="rejected", desired_state="shutdown", error=race)
        if t.id == "robomaker2"
        else t
        for t in matching(pinned)[0]
    ]
    _waiting, stuck = waiting_on(pinned, tasks)
    assert stuck == [f"robomaker: task rejected: {race}"]
    assert "`drgpu up` again" in stuck_hint(stuck)


def test_a_stuck_deploy_names_the_tasks_own_error_not_the_constraint_race(
    pinned: SwarmStack,
) -> None:
    """Docker 20.10 rejects a task whose node "no longer meets constraints" after the
    hook's own failure: the hook's error is the one to name."""
    tasks = [t for t in matching(pinned)[0] if t.service != "deepracer-0_sagemaker"]
    hook = "starting container failed: nvidia-container-cli: device error: 7: unknown device"
    race = "assigned node no longer meets constraints"
    ended = [
        task("sagemaker", 1, id="s1", state="failed", desired_state="shutdown", error=hook),
        task("sagemaker", 1, id="s2", state="rejected", desired_state="shutdown", error=race),
    ]
    _waiting, stuck = waiting_on(pinned, [*tasks, *ended])
    assert stuck == [f"sagemaker: task failed: {hook}"]


def test_simulators_on_another_nodes_gpu_are_pinned_there_and_proven_there(
    tmp_path: Path,
) -> None:
    """DR_ROBOMAKER_CUDA_DEVICES names a GPU node2 advertises (this host's NVML has not
    got it): the replicas are constrained to node2, their tasks there are left to the
    proof on that node, a task of them elsewhere is a problem."""
    from drgpu.core.facts import NodeFacts

    remote = "GPU-22222222-0000-4000-8000-000000000000"
    env_file = tmp_path / "system.env"
    env_file.write_text(f"DR_WORKERS=2\nDR_ROBOMAKER_CUDA_DEVICES={remote}\n")
    nodes = [NodeFacts("node2", "bed", "worker", "ready", {}, (remote,))]
    config, stack = read_settings(Inputs(env_file)), load_stack([base_stack_file()])
    plan = make_plan(config, stack, load_inventory(GTX_M40), nodes=nodes)
    services = swarm_services(plan, [s.name for s in stack.services], 2, GENERIC, nodes)
    [simulator] = [s for s in services if s.role.value == "simulator"]
    assert (simulator.pinned, simulator.node) == (((remote,), (remote,)), "node2")
    assert simulator.constraints == (SIMULATOR_CONSTRAINT, "node.id == node2")
    deployed = SwarmStack(plan.project, "", services, (), GENERIC)
    spec = dict(simulator.environment)  # a task's, as the manager records it: templates
    there = [task(simulator.name, slot, node_id="node2", environment=spec) for slot in (1, 2)]
    assert verify_tasks(deployed, there, {}) == []
    here = [replace(there[0], node_id="node1")]
    assert verify_tasks(deployed, here, {}) == [
        "robomaker.1: runs on node node1, pinned to node node2"
    ]
    with pytest.raises(GpuValidationError, match="must all be on one node"):
        env_file.write_text(f"DR_WORKERS=2\nDR_ROBOMAKER_CUDA_DEVICES={remote},{GTX}\n")
        make_plan(read_settings(Inputs(env_file)), stack, load_inventory(GTX_M40), nodes=nodes)


def test_reserving_tasks_beyond_what_the_simulator_nodes_advertise_are_refused(
    tmp_path: Path,
) -> None:
    stack = stack_for("workers-generic", tmp_path, GENERIC)
    wanted = sum(s.gpus * (s.replicas or 1) for s in stack.services if s.reserves)
    node = NodeFacts("node1", "box", "manager", "ready", {"Robomaker": "true"}, ("GPU-a",))
    facts = EngineFacts("28.2.2", "nvidia", ("nvidia",), nodes=(node,))
    short = short_of_gpus(stack.services, facts.nodes)
    assert short is not None and short.endswith(
        f"{wanted} NVIDIA-GPU resource(s) reserved in all, but the ready, active nodes"
        " labelled Robomaker advertise 1 by UUID"
    )
    with pytest.raises(GpuValidationError, match="advertise 1"):
        check_node(stack, facts)
    roomy = replace(node, advertised_gpus=tuple(f"GPU-{n}" for n in range(wanted)))
    assert short_of_gpus(stack.services, (roomy,)) is None
    unlabelled = replace(roomy, labels={})  # Swarm places no simulator there
    assert short_of_gpus(stack.services, (unlabelled,)) is not None
    assert short_of_gpus(stack.services, (replace(roomy, availability="drain"),)) is not None
    assert short_of_gpus(stack.services, ()) is None  # no manager: not known
