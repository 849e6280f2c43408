"""drgpu/core/gpu_board.py: the board of `drgpu status --watch`, from facts, its plain lines,
and the shared-GPU violation behind it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from drgpu.core.facts import ContainerFacts, NodeFacts, ProcessFacts, TaskFacts
from drgpu.core.gpu_board import GpuRow, build_board, memory_percent
from drgpu.core.gpu_usage import build_status
from drgpu.core.model import Gpu, GpuProcess, Inventory
from drgpu.core.swarm_view import SwarmState
from drgpu.ui.live import board_lines

G0, G1, G2 = (f"GPU-{n}0000000-0000-4000-8000-00000000000{n}" for n in range(3))
TRAINER, SIMULATOR, INTRUDER = ("a" * 64, "b" * 64, "c" * 64)


def gpu(index: int, uuid: str, *procs: GpuProcess, **fields: Any) -> Gpu:
    return Gpu(
        index=index,
        uuid=uuid,
        name=f"GPU model {index}",
        pci_bus_id=f"00000000:0{index}:00.0",
        memory_total_mib=16384,
        memory_used_mib=4096,
        utilization_gpu_percent=50,
        processes=procs,
        **fields,
    )


def container(
    cid: str, service: str, gpus: str, run_id: str = "0", role: str = "trainer", **extra: str
) -> ContainerFacts:
    return ContainerFacts(
        id=cid,
        name=f"deepracer-{run_id}-{service}-1",
        service=service,
        project=f"deepracer-{run_id}",
        state="running",
        labels={"drgpu.run_id": run_id, "drgpu.gpus": gpus, "drgpu.role": role, **extra},
    )


def flagged(row: GpuRow) -> bool:
    """Whether something on this GPU is marked wrong."""
    return bool(row.problems) or any(o.problem for o in row.occupants)


def cgroup(cid: str) -> str:
    return f"0::/system.slice/docker-{cid}.scope\n"


STACK = [
    container(TRAINER, "sagemaker", G1),
    container(SIMULATOR, "robomaker", G0, role="simulator"),
]


def test_each_gpu_lists_its_containers_with_run_role_process_and_memory() -> None:
    inventory = Inventory(
        gpus=(gpu(0, G0, GpuProcess(200, 300)), gpu(1, G1, GpuProcess(100, 900)), gpu(2, G2))
    )
    status = build_status(inventory, STACK, [], {100: cgroup(TRAINER), 200: cgroup(SIMULATOR)})
    board = build_board(status)
    assert [row.gpu.index for row in board.gpus] == [0, 1, 2]
    (simulator,) = board.gpus[0].occupants
    assert simulator.names == (
        "run 0 · simulator · robomaker",
        "0 · simulator · robomaker",
        "0 · robomaker",
    )
    assert (simulator.pid, simulator.memory_mib, simulator.problem) == (200, 300, "")
    assert board.gpus[1].occupants[0].pid == 100
    assert board.gpus[2].occupants == ()
    assert not board.problems and not any(flagged(row) for row in board.gpus)
    assert memory_percent(board.gpus[0].gpu) == 25


def test_a_holder_without_a_process_is_listed_idle() -> None:
    inventory = Inventory(gpus=(gpu(0, G0), gpu(1, G1)))
    board = build_board(build_status(inventory, STACK, [], {}))
    (idle,) = board.gpus[1].occupants
    assert (idle.names[-1], idle.pid, idle.memory_mib) == ("0 · sagemaker", None, None)


def test_a_process_on_a_gpu_its_container_was_not_given_is_flagged_on_that_gpu() -> None:
    inventory = Inventory(gpus=(gpu(0, G0, GpuProcess(100, 512)), gpu(1, G1)))
    board = build_board(build_status(inventory, STACK, [], {100: cgroup(TRAINER)}))
    wrong = [o for o in board.gpus[0].occupants if o.pid == 100]
    assert wrong[0].problem.startswith("WRONG-GPU: given GPU 1")
    assert flagged(board.gpus[0]) and len(board.problems) == 1
    lines = board_lines(board, stamp="12:00:00")
    assert any(
        line.startswith("12:00:00   ! run 0 · trainer · sagemaker pid 100") for line in lines
    )
    assert lines[-1] == "12:00:00 1 violation(s)"


def test_a_stray_process_of_no_stack_is_flagged() -> None:
    inventory = Inventory(gpus=(gpu(0, G0, GpuProcess(300, 64)),))
    board = build_board(build_status(inventory, [], [], {300: "0::/user.slice\n"}))
    (stray,) = board.gpus[0].occupants
    assert stray.names[0] == "no run · - · host" and stray.problem.startswith("STRAY")


def test_a_gpu_held_by_two_runs_is_a_violation_on_its_row() -> None:
    other = container(INTRUDER, "robomaker", G0, run_id="7", role="simulator")
    inventory = Inventory(gpus=(gpu(0, G0), gpu(1, G1)))
    status = build_status(inventory, [*STACK, other], [], {})
    assert [v.kind for v in status.violations] == ["shared-gpu"]
    assert status.violations[0].facts["gpu_index"] == 0
    board = build_board(status)
    assert board.gpus[0].problems == ("held by runs 0, 7",)
    assert board.problems[0].startswith("GPU 0 (GPU model 0) is held by runs 0, 7")
    assert {o.names[-1] for o in board.gpus[0].occupants} == {"0 · robomaker", "7 · robomaker"}
    # Filtered to one of them, the violation stays; to an uninvolved run, it goes.
    assert build_status(inventory, [*STACK, other], [], {}, run_id="7").violations
    assert not build_status(inventory, [*STACK, other], [], {}, run_id="9").violations


def test_two_runs_that_both_time_slice_may_share_a_gpu() -> None:
    sliced = {"drgpu.sharing": "timeslice"}
    stack = [
        container(SIMULATOR, "robomaker", G0, role="simulator", **sliced),
        container(INTRUDER, "robomaker", G0, run_id="7", role="simulator", **sliced),
    ]
    assert build_status(Inventory(gpus=(gpu(0, G0),)), stack, [], {}).ok


def test_a_lost_gpu_is_marked_and_its_holder_reported() -> None:
    lost = Gpu(index=1, uuid="", name="", pci_bus_id="", memory_total_mib=0, error="gpu_is_lost")
    board = build_board(build_status(Inventory(gpus=(gpu(0, G0), lost)), STACK, [], {}))
    assert board.gpus[1].gpu.lost and board.gpus[1].problems == ("lost (gpu_is_lost)",)
    assert board.problems[0].startswith("run 0 service sagemaker")
    assert "t GPU 1 ? ! lost (gpu_is_lost)" in board_lines(board, stamp="t")


def test_the_run_filter_keeps_only_that_runs_containers() -> None:
    other = container(INTRUDER, "robomaker", G2, run_id="7", role="simulator")
    inventory = Inventory(gpus=(gpu(0, G0), gpu(1, G1), gpu(2, G2)))
    board = build_board(build_status(inventory, [*STACK, other], [], {}, run_id="7"))
    assert board.scope == "run 7"
    assert [len(row.occupants) for row in board.gpus] == [0, 0, 1]


def test_a_stray_process_is_shown_by_its_command_and_user() -> None:
    inventory = Inventory(gpus=(gpu(0, G0, GpuProcess(300, 64), GpuProcess(100, 32)),))
    commands = {300: ProcessFacts(("python3", "bench.py", "--token", "t0p"), "alice")}
    status = build_status(
        inventory,
        [container(TRAINER, "sagemaker", G0)],
        [],
        {300: "0::/user.slice\n", 100: cgroup(TRAINER)},
        commands={**commands, 100: ProcessFacts(("python3", "-m", "rl_coach"), "root")},
    )
    stray, placed = sorted(build_board(status).gpus[0].occupants, key=lambda o: o.names[0])
    assert stray.names == ("alice · python3 bench.py --token ***",)
    assert placed.names[0] == "run 0 · trainer · sagemaker"  # drgpu's own, by their service
    lines = board_lines(build_board(status), stamp="t")
    assert "t   ! alice · python3 bench.py --token *** pid 300 64 MiB STRAY: on the host" in lines


def test_a_lost_gpu_keeps_its_row_with_the_containers_given_it() -> None:
    lost = Gpu(index=1, uuid="", name="", pci_bus_id="", memory_total_mib=0, error="gpu_is_lost")
    board = build_board(build_status(Inventory(gpus=(gpu(0, G0), lost)), STACK, [], {}))
    (trainer,) = board.gpus[1].occupants
    assert trainer.names[0] == "run 0 · trainer · sagemaker"
    assert trainer.problem == f"MISSING-GPU: given {G1}"
    assert flagged(board.gpus[1])


def test_with_several_lost_gpus_the_row_says_which_it_may_have_been() -> None:
    lost = [
        Gpu(index=n, uuid="", name="", pci_bus_id="", memory_total_mib=0, error="gpu_is_lost")
        for n in (1, 2)
    ]
    board = build_board(build_status(Inventory(gpus=(gpu(0, G0), *lost)), STACK, [], {}))
    (trainer,) = board.gpus[1].occupants
    assert trainer.problem.endswith("(one of GPUs 1, 2)")
    assert board.gpus[2].occupants == ()


def test_a_swarm_managers_board_has_a_line_per_other_node_with_its_tasks_gpus() -> None:
    here = NodeFacts("manager-node-id", "box", "manager", "ready")
    worker = NodeFacts("worker-node-id1", "gpu2", "worker", "ready")
    down = NodeFacts("worker-node-id2", "gpu3", "worker", "down")
    task = TaskFacts(
        "t2", "deepracer-7_robomaker", 2, worker.id, "running", "running", "",
        generic_resources=(("NVIDIA-GPU", G1),), run_id="7",
        labels={"drgpu.run_id": "7", "drgpu.swarm_gpus": "1"},
    )  # fmt: skip
    other_run = replace(task, id="t3", run_id="8", generic_resources=(("NVIDIA-GPU", G2),))
    swarm = SwarmState((here, worker, down), (task, other_run), (here.id,), here=here.id)
    status = replace(build_status(Inventory((gpu(0, G0),)), [], [], {}), swarm=swarm, run_id="7")
    lines = build_board(status).nodes
    assert lines == (
        f"node gpu2 (worker-node-), worker, ready, GPUs not read: deepracer-7_robomaker.2 on {G1}",
        "node gpu3 (worker-node-), worker, down, GPUs not read: no task of a run",
    )
    assert lines[0] in "\n".join(board_lines(build_board(status), stamp="12:00:00"))
    # A lost node's task that may still run is on its line; a drained node says so.
    lost = replace(task, id="t4", node_id=down.id, state="rejected", started=True)
    drained = replace(worker, availability="drain")
    swarm = SwarmState((here, drained, down), (lost,), (here.id,), here=here.id)
    assert build_board(replace(status, swarm=swarm)).nodes == (
        "node gpu2 (worker-node-), worker, ready, drain, GPUs not read: no task of a run",
        f"node gpu3 (worker-node-), worker, down, GPUs not read: deepracer-7_robomaker.2 on {G1}",
    )


def test_a_run_with_no_container_here_is_said() -> None:
    status = build_status(Inventory((gpu(0, G0),)), STACK, [], {}, run_id="5")
    assert status.notes == ("no container of run 5 is on this engine",)
    assert build_status(Inventory((gpu(0, G0),)), STACK, [], {}, run_id="0").notes == ()
