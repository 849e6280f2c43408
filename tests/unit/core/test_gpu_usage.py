"""`drgpu status` and the holders of `drgpu gpus`, judged from facts (no engine, no NVML)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from drgpu.core.facts import ContainerFacts
from drgpu.core.gpu_usage import Holder, build_status, forwarded_uuids, holders_by_gpu
from drgpu.core.model import Gpu, GpuProcess, Inventory, MigDevice
from drgpu.core.topology import inventory_from_json, inventory_to_json, merge_processes
from drgpu.ui.documents import status_document

G0, G1, G2 = (f"GPU-{n}0000000-0000-4000-8000-00000000000{n}" for n in range(3))
MIG = "MIG-11111111-2222-5333-8444-555555555555"
SAGEMAKER, ROBOMAKER, COACH, TRAINER_JOB, REDIS, OTHER_RUN = (f"{n:x}" * 64 for n in range(1, 7))


def docker_cgroup(container_id: str) -> str:
    return f"4:memory:/docker/{container_id}\n0::/docker/{container_id}\n"


HOST = "0::/user.slice/user-1000.slice/session-2.scope\n"


def gpu(index: int, uuid: str, *procs: GpuProcess, **fields: Any) -> Gpu:
    return Gpu(
        index=index,
        uuid=uuid,
        name=f"GPU model {index}",
        pci_bus_id=f"00000000:0{index}:00.0",
        memory_total_mib=16384,
        processes=procs,
        **fields,
    )


def container(
    cid: str,
    service: str,
    gpus: str = "",
    run_id: str = "0",
    state: str = "running",
    role: str = "trainer",
    **labels: str,
) -> ContainerFacts:
    return ContainerFacts(
        id=cid,
        name=f"deepracer-{run_id}-{service}-1",
        service=service,
        project=f"deepracer-{run_id}",
        state=state,
        labels={
            "drgpu.run_id": run_id,
            "drgpu.gpus": gpus,
            "drgpu.role": role,
            "com.docker.compose.service": service,
            **labels,
        },
    )


STACK = [
    container(SAGEMAKER, "sagemaker", G0),
    container(ROBOMAKER, "robomaker", G1, role="simulator"),
]
CGROUPS: dict[int, str | None] = {
    100: docker_cgroup(SAGEMAKER),
    200: docker_cgroup(ROBOMAKER),
    300: HOST,
    400: docker_cgroup(REDIS),
    500: docker_cgroup(TRAINER_JOB),
    600: None,
    700: docker_cgroup(OTHER_RUN),
}


def verdicts(status: Any) -> dict[tuple[int, int], str]:
    return {(p.pid, p.gpu.index): p.verdict for p in status.processes}


def test_processes_on_their_own_gpus_are_ok() -> None:
    inventory = Inventory(
        gpus=(gpu(0, G0, GpuProcess(100, 900)), gpu(1, G1, GpuProcess(200, 300, "C+G")))
    )
    status = build_status(inventory, STACK, [], CGROUPS)
    assert status.ok
    assert verdicts(status) == {(100, 0): "ok", (200, 1): "ok"}
    trainer = status.processes[0]
    assert (trainer.run_id, trainer.service, trainer.container) == (
        "0",
        "sagemaker",
        "deepracer-0-sagemaker-1",
    )


def test_a_process_on_a_gpu_its_service_was_not_given_is_a_violation() -> None:
    inventory = Inventory(gpus=(gpu(0, G0, GpuProcess(200, 100)), gpu(1, G1, GpuProcess(200, 50))))
    status = build_status(inventory, STACK, [], CGROUPS)
    assert verdicts(status) == {(200, 0): "wrong-gpu", (200, 1): "ok"}
    (violation,) = status.violations
    assert violation.kind == "wrong-gpu"
    assert violation.facts["pid"] == 200
    assert "run 0 service robomaker" in violation.message
    assert "runs on GPU 0 (GPU model 0), but was given GPU 1" in violation.message


def test_a_service_given_no_gpu_may_use_none() -> None:
    stack = [container(REDIS, "redis", "", role="other")]
    inventory = Inventory(gpus=(gpu(0, G0, GpuProcess(400, 10)),))
    status = build_status(inventory, stack, [], CGROUPS)
    assert status.processes[0].verdict == "wrong-gpu"
    assert status.processes[0].reason == "given no GPU"


def test_host_compute_processes_are_strays_and_display_servers_are_not() -> None:
    inventory = Inventory(
        gpus=(gpu(0, G0, GpuProcess(300, 10)), gpu(1, G1, GpuProcess(300, 40, "G")))
    )
    status = build_status(inventory, STACK, [], CGROUPS)
    assert verdicts(status) == {(300, 0): "stray", (300, 1): "display"}
    assert [v.kind for v in status.violations] == ["stray"]
    assert "belongs to no drgpu stack: it runs on the host" in status.violations[0].message


def test_a_process_in_a_container_drgpu_did_not_start_is_a_stray() -> None:
    redis = ContainerFacts(id=REDIS, name="my-redis", service="", project="", state="running")
    inventory = Inventory(gpus=(gpu(0, G0, GpuProcess(400, 10)),))
    status = build_status(inventory, STACK, [redis], CGROUPS)
    process = status.processes[0]
    assert (process.verdict, process.container) == ("stray", "my-redis")
    assert "in my-redis, not started by drgpu" in status.violations[0].message


def test_a_container_the_engine_does_not_know_is_named_by_its_id() -> None:
    inventory = Inventory(gpus=(gpu(0, G0, GpuProcess(400, 10)),))
    status = build_status(inventory, STACK, [], CGROUPS)
    process = status.processes[0]
    assert (process.verdict, process.container, process.container_id) == ("stray", None, REDIS)
    assert f"docker container {REDIS[:12]}" in process.reason


def test_an_invisible_pid_is_listed_but_not_flagged() -> None:
    inventory = Inventory(gpus=(gpu(0, G0, GpuProcess(600, 10), GpuProcess(601, 10)), gpu(1, G1)))
    status = build_status(inventory, STACK, [], CGROUPS)
    assert verdicts(status) == {(600, 0): "unknown", (601, 0): "unknown"}
    assert status.ok
    assert any("PID namespace" in note for note in status.notes)


def test_a_mig_slice_covers_its_parent_gpu() -> None:
    stack = [container(SAGEMAKER, "sagemaker", MIG)]
    sliced = gpu(0, G0, GpuProcess(100, 10), mig_mode=True, mig_devices=(MigDevice(MIG, 9856),))
    status = build_status(Inventory(gpus=(sliced,)), stack, [], CGROUPS)
    assert status.ok
    holders = holders_by_gpu(Inventory(gpus=(sliced,)), stack)
    assert holders == {0: (Holder("0", "sagemaker", "deepracer-0-sagemaker-1", MIG),)}


COACH_CONTAINER = container(
    COACH, "rl_coach", "", role="trainer-launcher", **{"drgpu.forwarded_gpus": G0}
)
TRAINER_JOB_CONTAINER = ContainerFacts(
    id=TRAINER_JOB,
    name="tmpa1b2c3_algo-1-x7k2p_1",
    service="algo-1-x7k2p",
    project="tmpa1b2c3",
    state="running",
)


def test_a_sagemaker_trainer_belongs_to_the_rl_coach_that_forwards_its_gpu() -> None:
    stack = [COACH_CONTAINER, STACK[1]]
    inventory = Inventory(gpus=(gpu(0, G0, GpuProcess(500, 8000)), gpu(1, G1)))
    status = build_status(inventory, stack, [TRAINER_JOB_CONTAINER], CGROUPS)
    process = status.processes[0]
    assert (process.verdict, process.run_id) == ("ok", "0")
    assert process.service == "rl_coach/tmpa1b2c3_algo-1-x7k2p_1"


def test_a_sagemaker_trainer_that_got_every_gpu_is_caught_on_the_wrong_one() -> None:
    stack = [COACH_CONTAINER, STACK[1]]
    inventory = Inventory(gpus=(gpu(0, G0, GpuProcess(500, 8000)), gpu(1, G1, GpuProcess(500, 9))))
    status = build_status(inventory, stack, [TRAINER_JOB_CONTAINER], CGROUPS)
    assert verdicts(status) == {(500, 0): "ok", (500, 1): "wrong-gpu"}
    assert "SageMaker trainer of run 0's rl_coach (tmpa1b2c3_algo-1-x7k2p_1)" in (
        status.violations[0].message
    )
    assert status.violations[0].message.endswith("but was forwarded GPU 0")


def test_rl_coach_without_the_label_forwards_its_cuda_visible_devices() -> None:
    coach = ContainerFacts(
        id=COACH,
        name="c",
        service="rl_coach",
        project="p",
        state="running",
        labels={"drgpu.run_id": "0", "drgpu.role": "trainer-launcher"},
        environment={"CUDA_VISIBLE_DEVICES": G1},
    )
    assert forwarded_uuids(coach) == (G1,)
    assert forwarded_uuids(STACK[0]) == ()


def test_a_sagemaker_trainer_without_an_rl_coach_is_a_stray() -> None:
    inventory = Inventory(gpus=(gpu(0, G0, GpuProcess(500, 8000)),))
    status = build_status(inventory, STACK, [TRAINER_JOB_CONTAINER], CGROUPS)
    assert status.processes[0].verdict == "stray"


def test_a_sagemaker_trainer_belongs_to_the_run_its_environment_names() -> None:
    """Run 1's leftover trainer (RUN_ID=1, its rl_coach gone) on run 0's forwarded GPU is a
    stray of run 1, not run 0's wrong-gpu; beside run 1's live rl_coach, it is run 1's."""
    leftover = replace(
        TRAINER_JOB_CONTAINER, environment={"RUN_ID": "1", "CUDA_VISIBLE_DEVICES": G1}
    )
    inventory = Inventory(gpus=(gpu(0, G0), gpu(1, G1, GpuProcess(500, 8000))))
    status = build_status(inventory, [COACH_CONTAINER], [leftover], CGROUPS, sagemaker=[leftover])
    (process,) = status.processes
    assert (process.verdict, process.run_id) == ("stray", "1")
    assert "of run 1, which has no live rl_coach" in process.message
    assert not [f for f in status.violations if f.kind in ("wrong-gpu", "trainer-gpu")]
    coach1 = container("coach1", "rl_coach", "", run_id="1", role="trainer-launcher",
                       **{"drgpu.forwarded_gpus": G1})  # fmt: skip
    both = build_status(
        inventory, [COACH_CONTAINER, coach1], [leftover], CGROUPS, sagemaker=[leftover]
    )
    assert [(p.verdict, p.run_id) for p in both.processes] == [("ok", "1")]
    assert [c.run_id for c in both.trainers] == ["1"]


def test_two_runs_trainers_are_judged_by_the_run_their_inspected_environment_names() -> None:
    """The engine's listing has no environment: the trainers' inspected facts (`sagemaker`)
    name their runs, so run 1's trainer on run 0's GPU and run 0's on GPU 2 are wrong-gpu
    of their own runs (not run 0's ok, nor a stray of no stack)."""
    coach1 = container("coach1", "rl_coach", "", run_id="1", role="trainer-launcher",
                       **{"drgpu.forwarded_gpus": G1})  # fmt: skip
    listed = [TRAINER_JOB_CONTAINER, replace(TRAINER_JOB_CONTAINER, id=OTHER_RUN, name="t0")]
    inspected = [
        replace(listed[0], environment={"RUN_ID": "1", "CUDA_VISIBLE_DEVICES": G1}),
        replace(listed[1], environment={"RUN_ID": "0", "CUDA_VISIBLE_DEVICES": G0}),
    ]
    inventory = Inventory(
        gpus=(gpu(0, G0, GpuProcess(500, 700)), gpu(1, G1), gpu(2, G2, GpuProcess(700, 9)))
    )
    stack = [COACH_CONTAINER, coach1]
    status = build_status(inventory, stack, listed, CGROUPS, sagemaker=inspected)
    assert [(p.pid, p.verdict, p.run_id) for p in status.processes] == [
        (500, "wrong-gpu", "1"),
        (700, "wrong-gpu", "0"),
    ]
    assert "SageMaker trainer of run 1's rl_coach" in status.violations[0].message


def test_a_lost_gpu_is_noted_and_a_service_given_it_is_flagged() -> None:
    lost = Gpu(index=0, uuid="", name="", pci_bus_id="", memory_total_mib=0, error="gpu_is_lost")
    inventory = Inventory(gpus=(lost, gpu(1, G1, GpuProcess(200, 10))))
    status = build_status(inventory, STACK, [], CGROUPS)
    assert verdicts(status) == {(200, 1): "ok"}
    assert status.notes[0].startswith("GPU 0 is lost (gpu_is_lost)")
    (violation,) = status.violations
    assert violation.kind == "missing-gpu"
    assert G0 in violation.message
    assert status_document(status)["gpus"][0]["lost"] is True


def test_stopped_containers_hold_nothing_and_are_said() -> None:
    stopped = [container(SAGEMAKER, "sagemaker", G0, state="exited")]
    inventory = Inventory(gpus=(gpu(0, G0),))
    assert holders_by_gpu(inventory, stopped) == {}
    found = build_status(inventory, stopped, [], {}).findings
    assert [(f.kind, f.facts["service"]) for f in found] == [("service-stopped", "sagemaker")]


def test_holders_name_run_service_and_forwarding() -> None:
    inventory = Inventory(gpus=(gpu(0, G0), gpu(1, G1), gpu(2, G2)))
    holders = holders_by_gpu(inventory, [COACH_CONTAINER, *STACK[1:]])
    assert holders == {
        0: (Holder("0", "rl_coach", "deepracer-0-rl_coach-1", G0, forwarded=True),),
        1: (Holder("0", "robomaker", "deepracer-0-robomaker-1", G1),),
    }


def test_run_id_narrows_to_its_containers_gpus_and_their_processes() -> None:
    other_run = container(OTHER_RUN, "sagemaker", G2, run_id="1")
    inventory = Inventory(
        gpus=(
            gpu(0, G0, GpuProcess(100, 1), GpuProcess(700, 5)),
            gpu(1, G1, GpuProcess(200, 1)),
            gpu(2, G2, GpuProcess(700, 1), GpuProcess(300, 1)),
        )
    )
    status = build_status(inventory, [*STACK, other_run], [], CGROUPS, run_id="0")
    assert [c.id for c in status.containers] == [ROBOMAKER, SAGEMAKER]
    # Run 1's trainer on run 0's GPU 0 concerns run 0; the stray on run 1's GPU 2 does not.
    assert verdicts(status) == {(100, 0): "ok", (700, 0): "wrong-gpu", (200, 1): "ok"}
    assert [v.facts["pid"] for v in status.violations] == [700]
    whole = build_status(inventory, [*STACK, other_run], [], CGROUPS)
    assert sorted(v.facts["pid"] or 0 for v in whole.violations) == [300, 700]


def test_document_lists_runs_services_and_processes() -> None:
    inventory = Inventory(gpus=(gpu(0, G0, GpuProcess(100, 900)), gpu(1, G1)))
    doc = status_document(build_status(inventory, STACK, [], CGROUPS))
    assert doc["ok"] is True
    assert doc["gpus"][0]["held_by"][0]["service"] == "sagemaker"
    (run,) = doc["runs"]
    assert run["run_id"] == "0"
    assert run["services"]["sagemaker"][0]["processes"] == [
        {"pid": 100, "gpu_index": 0, "verdict": "ok"}
    ]
    assert run["services"]["robomaker"][0]["gpus"] == [G1]
    assert doc["processes"][0] == {
        "pid": 100,
        "gpu_index": 0,
        "gpu_uuid": G0,
        "used_memory_mib": 900,
        "type": "C",
        "container": "deepracer-0-sagemaker-1",
        "container_id": SAGEMAKER,
        "run_id": "0",
        "service": "sagemaker",
        "verdict": "ok",
        "reason": None,
        "message": None,
    }


# --- graphics processes, NVML's and the topology format's ------------------------------------


def test_merge_processes_one_entry_per_pid() -> None:
    merged = merge_processes([(1, 100, "C"), (2, 5, "G"), (1, 300, "G"), (3, 1, "C"), (3, 2, "C")])
    assert merged == (GpuProcess(1, 300, "C+G"), GpuProcess(2, 5, "G"), GpuProcess(3, 2, "C"))


@pytest.mark.parametrize("kind", ["C", "G", "C+G"])
def test_process_kinds_round_trip_through_the_topology_format(kind: str) -> None:
    inventory = Inventory(gpus=(gpu(0, G0, GpuProcess(7, 64, kind)),))
    assert inventory_from_json(inventory_to_json(inventory)).gpus[0].processes == (
        GpuProcess(7, 64, kind),
    )
