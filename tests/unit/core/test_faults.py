"""GPU faults, attributed to the drgpu containers on the GPU (core.faults), and `up`'s
pre-flight over NVML's health."""

from __future__ import annotations

import pytest

from drgpu.core.alerts import AlertState, due
from drgpu.core.facts import ContainerFacts
from drgpu.core.faults import ECC_EVENT, XID_EVENT, preflight, with_faults
from drgpu.core.findings import Level
from drgpu.core.gpu_usage import build_status
from drgpu.core.metrics import samples
from drgpu.core.model import (
    Assignment,
    Gpu,
    GpuEvent,
    GpuHealth,
    Inventory,
    Plan,
    Role,
    ServicePlan,
)
from drgpu.errors import GpuValidationError

G0, G1 = "GPU-00000000-0000-4000-8000-000000000000", "GPU-11111111-0000-4000-8000-000000000001"
GPUS = tuple(
    Gpu(i, uuid, "Tesla T4", f"00000000:0{i}:00.0", 15360) for i, uuid in enumerate((G0, G1))
)
TRAINER = ContainerFacts(
    id="a" * 64,
    name="deepracer-0-sagemaker-1",
    service="sagemaker",
    project="deepracer-0",
    state="running",
    labels={"drgpu.run_id": "0", "drgpu.gpus": G0, "drgpu.role": "trainer"},
)
STATUS = build_status(Inventory(gpus=GPUS), [TRAINER], [], {})


def test_a_healthy_gpu_adds_nothing() -> None:
    assert with_faults(STATUS, (GpuHealth(0, G0, throttle=0x1 | 0x4), GpuHealth(1, G1))) is STATUS


def test_an_xid_is_a_violation_of_the_run_and_service_on_that_gpu() -> None:
    event = GpuEvent(0, G0, XID_EVENT, 79, 0.0)
    judged = with_faults(STATUS, (), [event])
    (fault,) = judged.violations
    assert fault.kind == "gpu-fault" and fault.level == Level.FAIL
    assert fault.message == (
        "GPU 0: critical Xid 79 (fell off the bus) at 00:00:00 UTC"
        " (run 0 service sagemaker, deepracer-0-sagemaker-1)"
    )
    assert (fault.facts["run_id"], fault.facts["service"], fault.facts["gpu_uuid"]) == (
        "0",
        "sagemaker",
        G0,
    )
    # the exporters' series and --on-violation get it as any violation
    counts = {s.labels: s.value for s in samples(judged) if s.metric.name == "drgpu_violations"}
    assert counts == {(("kind", "gpu-fault"), ("run", "0"), ("service", "sagemaker")): 1.0}
    _, alerts = due(AlertState(), judged, 100.0)
    assert alerts[0].document()["kind"] == "gpu-fault"


def test_an_xid_on_a_gpu_lost_since_stays_its_holders() -> None:
    lost = Gpu(0, "", "", "", 0, error="gpu_is_lost")  # NVML no longer names it
    status = build_status(Inventory(gpus=(lost, GPUS[1])), [TRAINER], [], {})
    judged = with_faults(status, (), [GpuEvent(0, G0, XID_EVENT, 79, 0.0)])
    (fault,) = [v for v in judged.violations if v.kind == "gpu-fault"]
    assert (fault.facts["run_id"], fault.facts["service"]) == ("0", "sagemaker")


def test_a_fault_on_a_gpu_no_run_holds_has_no_run() -> None:
    health = GpuHealth(1, G1, ecc_uncorrected=2, remap_pending=True, throttle=0x40)
    found = with_faults(STATUS, [health], [GpuEvent(1, G1, ECC_EVENT, 0, 0.0)]).violations
    assert [f.message for f in found] == [
        "GPU 1: 2 uncorrectable ECC error(s) since the driver loaded",
        "GPU 1: row remapping pending (reset the GPU)",
        "GPU 1: clocks held down (hardware thermal slowdown)",
        "GPU 1: a double-bit ECC error at 00:00:00 UTC",
    ]
    assert {f.facts["run_id"] for f in found} == {None}


def test_events_that_cannot_be_followed_are_said() -> None:
    judged = with_faults(STATUS, (), (), "Not Supported")
    assert judged.notes[-1].startswith("NVML events are not followed here (Not Supported)")


def plan(*services: ServicePlan) -> Plan:
    return Plan(project="deepracer-0", run_id="0", services=services)


def service(name: str, role: Role, gpu: Gpu) -> ServicePlan:
    return ServicePlan(name, role, (Assignment(gpu),), (), (), ())


def test_preflight_refuses_a_gpu_with_pages_pending_and_warns_of_the_rest() -> None:
    busy = Gpu(0, G0, "Tesla T4", "00000000:00:00.0", 15360, memory_used_mib=14000)
    stack = plan(
        service("sagemaker", Role.TRAINER, busy), service("robomaker", Role.SIMULATOR, GPUS[1])
    )
    health = [
        GpuHealth(0, G0, retired_pending=True, persistence=False),
        GpuHealth(1, G1, remap_failure=True, persistence=True),
    ]
    problems, warnings = preflight(stack, health)
    assert problems == [
        "GPU 0: retired pages pending (reset the GPU)",
        "GPU 1: row remapping failed (the GPU needs service)",
    ]
    assert warnings[0].startswith("persistence mode is off on GPU 0:")
    assert warnings[1] == "GPU 0 has 1360 MiB free, below the 8192 MiB its services need"
    assert preflight(stack, [GpuHealth(0, G0), GpuHealth(1, G1)]) == ([], [warnings[1]])


def test_up_refuses_a_faulty_gpu_with_exit_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from drgpu.commands import up
    from drgpu.host import nvml

    stack = plan(service("sagemaker", Role.TRAINER, GPUS[0]))
    faulty = (GpuHealth(0, G0, remap_pending=True, persistence=False),)
    monkeypatch.setattr(nvml, "read_health", lambda: faulty)
    with pytest.raises(GpuValidationError) as refused:
        up._preflight(stack)
    assert refused.value.exit_code == 3 and "reset the GPU" in (refused.value.hint or "")
    assert "persistence mode is off on GPU 0" in capsys.readouterr().err  # said first
    monkeypatch.setattr(nvml, "read_health", lambda: (GpuHealth(0, G0),))
    up._preflight(stack)
    up._preflight(plan())  # no GPU planned: NVML is not asked
