"""drgpu/commands/status.py's Reader: across a watch's refreshes it remembers which
containers had GPU processes, so a running one whose processes vanish is marked."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from drgpu.commands import status
from drgpu.core.facts import ContainerFacts
from drgpu.core.model import Gpu, GpuProcess, Inventory
from drgpu.host import nvml

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
