"""drgpu/commands/status.py's Reader: across a watch's refreshes it remembers which
containers had GPU processes, so a running one whose processes vanish is marked."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from drgpu.commands import status
from drgpu.core.facts import ContainerFacts
from drgpu.core.model import Gpu, GpuProcess, Inventory
from drgpu.host import engine, nvml

G0 = "GPU-00000000-0000-4000-8000-000000000000"
SIM_ID = "c" * 64
SIMULATOR = ContainerFacts(
    id=SIM_ID,
    name="deepracer-0-robomaker-1",
    service="robomaker",
    project="deepracer-0",
    state="running",
    labels={"drgpu.run_id": "0", "drgpu.gpus": G0, "drgpu.role": "simulator"},
)
GPU = Gpu(0, G0, "Tesla T4", "00000000:01:00.0", 15360)


class Engine:
    """An engine session whose one container is the simulator."""

    def containers(self) -> list[ContainerFacts]:
        return [replace(SIMULATOR, environment={})]

    def inspect(self, container_id: str) -> ContainerFacts | None:
        return SIMULATOR if container_id == SIM_ID else None


@pytest.fixture(autouse=True)
def _engine_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Reader's engine connection is an Engine here."""
    monkeypatch.setattr(engine, "listing", lambda connection: connection.containers())
    monkeypatch.setattr(engine, "inspected", lambda connection, id_: connection.inspect(id_))


def test_processes_that_vanish_between_refreshes_are_warned_of(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inventories = [
        Inventory(gpus=(replace(GPU, processes=(GpuProcess(777, 900, "C+G"),)),)),
        Inventory(gpus=(GPU,)),
        Inventory(gpus=(GPU,)),
    ]

    def inventory(session: Any) -> Inventory:
        return inventories.pop(0)

    monkeypatch.setattr(nvml, "inventory_from_nvml", inventory)
    monkeypatch.setattr(nvml, "health_from_nvml", lambda session, count: ())
    monkeypatch.setattr(status, "read_cgroup", lambda pid: f"0::/docker/{SIM_ID}\n")
    reader = status.Reader(object(), Engine())  # type: ignore[arg-type]
    working = reader.snapshot()
    assert working.ok and working.warnings == ()
    vanished = reader.snapshot()
    assert [w.kind for w in vanished.warnings] == ["processes-vanished"]
    assert vanished.warnings[0].facts["container"] == SIMULATOR.name
    assert [w.kind for w in reader.snapshot().warnings] == ["processes-vanished"]


def test_on_a_swarm_manager_a_snapshot_judges_the_whole_swarm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from drgpu.core.facts import NodeFacts
    from drgpu.core.swarm_view import SwarmState

    monkeypatch.setattr(nvml, "inventory_from_nvml", lambda session: Inventory(gpus=(GPU,)))
    monkeypatch.setattr(nvml, "health_from_nvml", lambda session, count: ())
    here = NodeFacts("m" * 25, "bed", "manager", "ready", advertised_gpus=(G0,))
    lost = NodeFacts("w" * 25, "bed", "worker", "down")
    swarm = SwarmState((here, lost), (), (here.id,))
    reader = status.Reader(object(), Engine(), None, lambda: swarm)  # type: ignore[arg-type]
    judged = reader.snapshot()
    assert not judged.ok and [w.kind for w in judged.warnings] == ["node-down"]
    assert judged.swarm == swarm
    assert status.Reader(object(), Engine()).snapshot().ok  # type: ignore[arg-type]


def test_a_swarm_violation_goes_to_the_exporters_and_on_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from drgpu.core.alerts import Alert
    from drgpu.core.facts import NodeFacts, TaskFacts
    from drgpu.core.metrics import VIOLATIONS, samples
    from drgpu.core.swarm_view import SwarmState

    monkeypatch.setattr(nvml, "inventory_from_nvml", lambda session: Inventory(gpus=(GPU,)))
    monkeypatch.setattr(nvml, "health_from_nvml", lambda session, count: ())
    lost = NodeFacts("w" * 25, "bed", "worker", "down")
    task = TaskFacts("t" * 25, "deepracer-0_robomaker", 1, lost.id, "running", "running", "")
    stack = {"com.docker.stack.namespace": "deepracer-0"}  # as on a stack's container spec
    swarm = SwarmState((lost,), (replace(task, run_id="0", labels=stack),), ())
    judged = status.Reader(object(), Engine(), None, lambda: swarm).snapshot()  # type: ignore[arg-type]
    assert [v.kind for v in judged.violations] == ["node-down", "task-on-lost-node"]
    counted = {dict(s.labels)["kind"]: s.value for s in samples(judged) if s.metric == VIOLATIONS}
    assert counted == {"node-down": 1.0, "task-on-lost-node": 1.0}
    alert = Alert(judged.violations[1], 0.0).document()
    assert (alert["run"], alert["service"], alert["pid"]) == ("0", "robomaker", None)


def test_other_nodes_are_read_on_the_node_at_most_once_a_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from drgpu.core.facts import NodeFacts, TaskFacts
    from drgpu.core.swarm_view import SwarmState
    from drgpu.host import swarm_engine

    here = NodeFacts("m" * 25, "bed", "manager", "ready")
    worker = NodeFacts("w" * 25, "bed", "worker", "ready", advertised_gpus=(G0,))
    task = TaskFacts("t" * 25, "r", 1, worker.id, "running", "running", "", run_id="0")
    swarm = SwarmState((here, worker), (replace(task, image="img"),), (here.id,))
    clock, rounds = [100.0], list[dict[str, str]]()
    stray = Inventory(gpus=(replace(GPU, processes=(GpuProcess(7, 64),)),))
    said: list[Any] = [(stray, {7: "0::/user.slice\n"})]
    monkeypatch.setattr("drgpu.commands.status.time.monotonic", lambda: clock[0])
    monkeypatch.setattr(swarm_engine, "engine_facts", lambda: SimpleNamespace(node_id=here.id))
    monkeypatch.setattr(swarm_engine, "swarm_picture", lambda engine, node: swarm)

    def node_gpus(source: str, images: dict[str, str]) -> dict[str, Any]:
        rounds.append(images)
        return {worker.id: said[0]}

    monkeypatch.setattr(swarm_engine, "node_gpus", node_gpus)
    read = status.swarm_reader(SimpleNamespace(connection=None), interval_s=1.0)  # type: ignore[arg-type]
    first = read()
    assert first is not None and first.seen == (here.id, worker.id)
    assert [(f.kind, f.facts["node"]) for f in first.node_findings] == [("stray", worker.id)]
    clock[0] += 9  # within the round: the reading is reused, no job runs
    assert read() == first and rounds == [{worker.id: "img"}]
    said[0] = "the reading job said: boom"
    clock[0] += 22  # a new round fails; the old reading is older than 3 rounds
    late = read()
    assert late is not None and late.seen == (here.id,) and len(rounds) == 2
    assert late.unseen_why == {worker.id: "the reading job said: boom"}
    from drgpu.core.swarm_view import swarm_findings

    unseen = [f for f in swarm_findings(late) if f.kind == "node-unseen"]
    assert [f.message for f in unseen] == [
        f"{worker.name}: GPUs not seen, the reading job said: boom"
    ]


def test_a_gpu_process_is_read_in_proc_once_while_its_pid_names_the_same_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    busy = Inventory(gpus=(replace(GPU, processes=(GpuProcess(777, 900, "C"),)),))
    monkeypatch.setattr(nvml, "inventory_from_nvml", lambda session: busy)
    monkeypatch.setattr(nvml, "health_from_nvml", lambda session, count: ())
    reads: list[int] = []
    keys = [1, 1, 2, None, None]

    def read_cgroup(pid: int) -> str:
        reads.append(pid)
        return f"0::/docker/{SIM_ID}\n"

    monkeypatch.setattr(status, "process_key", lambda pid: keys.pop(0))
    monkeypatch.setattr(status, "read_process", lambda pid: None)
    monkeypatch.setattr(status, "read_cgroup", read_cgroup)
    reader = status.Reader(object(), Engine())  # type: ignore[arg-type]
    for _ in keys[:]:
        assert reader.snapshot().processes[0].run_id == "0"
    assert reads == [777] * 4  # the same process twice (key 1), another (2), then unknown


def test_a_task_stopped_here_is_judged_by_the_manager_or_warned_of_on_a_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from drgpu.core.facts import NodeFacts
    from drgpu.core.swarm_view import SwarmState

    task = {**SIMULATOR.labels, "com.docker.swarm.task.name": "deepracer-0_robomaker.1.t"}
    killed = replace(SIMULATOR, state="exited", exit_code=137, labels=task)

    class Killed(Engine):
        def containers(self) -> list[ContainerFacts]:
            return [killed]

        def inspect(self, container_id: str) -> ContainerFacts | None:
            return killed

    monkeypatch.setattr(nvml, "inventory_from_nvml", lambda session: Inventory(gpus=(GPU,)))
    monkeypatch.setattr(nvml, "health_from_nvml", lambda session, count: ())
    worker = status.Reader(object(), Killed()).snapshot()  # type: ignore[arg-type]
    assert [w.kind for w in worker.findings] == ["task-unjudged"]
    here = NodeFacts("m" * 25, "bed", "manager", "ready")
    swarm = SwarmState((here,), (), (here.id,))
    assert status.Reader(object(), Killed(), None, lambda: swarm).snapshot().ok  # type: ignore[arg-type]
