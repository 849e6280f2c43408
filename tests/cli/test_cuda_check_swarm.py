"""`drgpu cuda-check --all` on a swarm node: the containers of tasks Swarm replaced are left
alone; on a worker, a task stopped here that no newer container of its slot replaced is
said and not checked, for Swarm may have replaced it on another node."""

from __future__ import annotations

import json

import pytest

from drgpu.core.facts import ContainerFacts, TaskFacts
from tests.support.runners import Cli

G0 = "GPU-00000000-0000-4000-8000-000000000000"
G1 = "GPU-11111111-1111-4111-8111-111111111111"
PROJECT = "deepracer-7"
HERE = "n" * 25


def task_container(slot: int, task: str, state: str, gpu: str, started: float) -> ContainerFacts:
    name = f"{PROJECT}_robomaker.{slot}.{task}"
    return ContainerFacts(
        id=task * 2,
        name=name,
        service="robomaker",
        project=PROJECT,
        state=state,
        labels={
            "drgpu.run_id": "7",
            "drgpu.gpus": gpu,
            "com.docker.stack.namespace": PROJECT,
            "com.docker.swarm.task.name": name,
        },
        exit_code=None if state == "running" else 0,
        started_at=started,
    )


OLD_1 = task_container(1, "old1", "exited", G0, 10.0)  # replaced by NEW_1, here
NEW_1 = task_container(1, "new1", "running", G0, 20.0)
OLD_2 = task_container(2, "old2", "exited", G1, 10.0)  # replaced on another node


def task(container: ContainerFacts, desired: str, node: str = HERE) -> TaskFacts:
    slot = int(container.name.split(".")[1])
    state = "running" if container.state == "running" else "shutdown"
    return TaskFacts(
        id=container.id[:25],
        service=f"{PROJECT}_robomaker",
        slot=slot,
        node_id=node,
        state=state,
        desired_state=desired,
        error="",
        run_id="7",
        container_id=container.id,
        version=2 if desired == "running" else 1,
    )


@pytest.fixture
def probed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The containers the probe runs in (each sees exactly its GPU)."""
    seen: list[str] = []

    def probe_in(container: ContainerFacts, arguments: list[str]) -> tuple[int, str]:
        seen.append(container.name)
        gpus = [{"uuid": u} for u in arguments[2:]]
        report = {
            "expectations": {"met": True},
            "nvml": {"devices": gpus},
            "cuda": {"devices": gpus},
        }
        return 0, json.dumps(report)

    monkeypatch.setattr("drgpu.commands.cuda_check.probe_in", probe_in)
    here = [OLD_1, NEW_1, OLD_2]
    monkeypatch.setattr("drgpu.host.engine.project_containers", lambda project: here)
    return seen


def test_on_a_manager_the_containers_of_replaced_tasks_are_left_alone(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, probed: list[str]
) -> None:
    moved = TaskFacts(  # slot 2's new task, on another node
        id="m" * 25,
        service=f"{PROJECT}_robomaker",
        slot=2,
        node_id="w" * 25,
        state="running",
        desired_state="running",
        error="",
        run_id="7",
        version=2,
    )
    tasks = [task(OLD_1, "shutdown"), task(NEW_1, "running"), task(OLD_2, "shutdown"), moved]
    monkeypatch.setattr("drgpu.host.swarm_engine.managed_tasks", lambda name: (tasks, HERE))
    monkeypatch.setattr("drgpu.commands.cuda_check.probes_elsewhere", lambda project, remote: [])
    result = cli("cuda-check", "--all", "--run-id", "7")
    assert result.code == 0, result.err
    assert probed == [NEW_1.name]


def test_on_a_worker_a_replaced_task_is_left_alone_and_one_maybe_moved_said(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, probed: list[str]
) -> None:
    monkeypatch.setattr("drgpu.host.swarm_engine.managed_tasks", lambda name: None)
    result = cli("cuda-check", "--all", "--run-id", "7")
    assert result.code == 0, result.err
    assert probed == [NEW_1.name]
    assert f"not checked, stopped here: {OLD_2.name}" in result.err
    assert OLD_1.name not in result.err
    # with nothing else to check, it is refused as a container not running
    monkeypatch.setattr("drgpu.host.engine.project_containers", lambda project: [OLD_2])
    refused = cli("cuda-check", "--all", "--run-id", "7")
    assert refused.code == 5 and f"{OLD_2.name} is exited, not running" in refused.err
