"""status's warnings: a GPU whose processes NVML cannot list is unknown, never "no
process"; a running container whose GPU processes vanished is marked."""

from __future__ import annotations

from dataclasses import replace

from drgpu.core.facts import ContainerFacts
from drgpu.core.findings import Level
from drgpu.core.gpu_board import build_board
from drgpu.core.gpu_usage import IDLE_NOTE_S, build_status
from drgpu.core.model import Gpu, GpuProcess, Inventory
from drgpu.ui.documents import status_document

G0 = "GPU-00000000-0000-4000-8000-000000000000"
G1 = "GPU-11111111-1111-4111-8111-111111111111"
SIM_ID = "b" * 64
STARTED = 1_700_000_000.0


def gpu(index: int, uuid: str, **changes: object) -> Gpu:
    base = Gpu(index, uuid, "Tesla T4", f"00000000:0{index + 1}:00.0", 15360)
    return replace(base, **changes)  # type: ignore[arg-type]


SIMULATOR = ContainerFacts(
    id=SIM_ID,
    name="deepracer-0-robomaker-1",
    service="robomaker",
    project="deepracer-0",
    state="running",
    labels={"drgpu.run_id": "0", "drgpu.gpus": G1, "drgpu.role": "simulator"},
    started_at=STARTED,
)
WORKING = gpu(1, G1, processes=(GpuProcess(4321, 700, "C+G"),))
CGROUPS: dict[int, str | None] = {4321: f"0::/system.slice/docker-{SIM_ID}.scope\n"}


def test_a_gpu_whose_processes_cannot_be_listed_is_unknown_not_empty() -> None:
    unknown = gpu(0, G0, processes_unknown="compute processes: Function Not Found")
    status = build_status(Inventory(gpus=(unknown, WORKING)), [SIMULATOR], [], CGROUPS)
    [warning] = status.warnings
    assert warning.kind == "processes-unknown" and warning.facts["gpu_index"] == 0
    assert warning.message.startswith("status cannot list processes on GPU 0 (Tesla T4)")
    assert not status.ok and not status.violations  # a warning: said, but no exit 6
    doc = status_document(status)
    assert doc["ok"] is False and doc["findings"][0]["kind"] == "processes-unknown"
    assert [g["processes_known"] for g in doc["gpus"]] == [False, True]
    assert build_board(status).gpus[0].problems == ("processes unknown",)


def test_processes_that_vanish_from_a_running_container_are_marked() -> None:
    first = build_status(Inventory(gpus=(WORKING,)), [SIMULATOR], [], CGROUPS)
    assert first.ok and [p.container_id for p in first.processes] == [SIM_ID]
    idle = replace(WORKING, processes=())
    later = build_status(Inventory(gpus=(idle,)), [SIMULATOR], [], {}, had_processes={SIM_ID})
    [warning] = later.warnings
    assert warning.kind == "processes-vanished"
    assert (warning.facts["container"], warning.facts["run_id"]) == (SIMULATOR.name, "0")
    assert "cuda-check --service robomaker" in warning.message
    [row] = build_board(later).gpus
    assert [o.problem for o in row.occupants] == ["GPU PROCESSES VANISHED"]
    # a container that stopped is no vanishing: its own violation says so
    stopped = replace(SIMULATOR, state="exited")
    gone = build_status(Inventory(gpus=(idle,)), [stopped], [], {}, had_processes={SIM_ID})
    assert (gone.warnings, [v.kind for v in gone.violations]) == ((), ["service-stopped"])


def test_a_run_container_that_stopped_is_a_violation_and_an_ended_one_a_warning() -> None:
    idle = Inventory(gpus=(replace(WORKING, processes=()),))
    killed = replace(SIMULATOR, state="exited", exit_code=137)
    status = build_status(idle, [killed], [], {})
    [violation] = status.violations
    assert (violation.kind, violation.facts["container"]) == ("service-stopped", SIMULATOR.name)
    assert violation.message == (
        "run 0 service robomaker (deepracer-0-robomaker-1) exited with status 137"
    )
    ended = build_status(idle, [replace(killed, exit_code=0)], [], {})
    assert [(w.kind, w.level) for w in ended.warnings] == [("service-ended", Level.WARN)]
    assert ended.violations == ()
    no_gpu = replace(killed, exit_code=0, labels={"drgpu.run_id": "0", "drgpu.role": "other"})
    task = {**SIMULATOR.labels, "com.docker.swarm.task.name": "deepracer-0_robomaker.1.x"}
    starting = replace(killed, state="created", exit_code=0)  # as the engine reports it
    for quiet in (no_gpu, starting):
        assert build_status(idle, [quiet], [], {}).findings == ()
    # on a manager, a task is judged as a task (swarm_view)
    assert build_status(idle, [replace(killed, labels=task)], [], {}, manager=True).ok
    looping = build_status(idle, [replace(starting, state="restarting")], [], {})
    assert [v.kind for v in looping.violations] == ["service-stopped"]


def test_a_gpu_whose_process_is_not_visible_here_is_no_idle_one() -> None:
    hidden = {4321: None}  # its cgroup not readable: drgpu runs in another PID namespace
    status = build_status(Inventory(gpus=(WORKING,)), [SIMULATOR], [], hidden, now=STARTED + 3600)
    assert not [n for n in status.notes if "has run no GPU process" in n]
    later = build_status(
        Inventory(gpus=(WORKING,)), [SIMULATOR], [], hidden, had_processes={SIM_ID}
    )
    assert later.warnings == ()  # nor did its processes vanish


def test_one_shot_status_notes_a_long_idle_gpu_container() -> None:
    idle = Inventory(gpus=(replace(WORKING, processes=()),))
    soon = build_status(idle, [SIMULATOR], [], {}, now=STARTED + 60)
    assert soon.notes == () and soon.ok
    late = build_status(idle, [SIMULATOR], [], {}, now=STARTED + IDLE_NOTE_S + 60)
    [note] = late.notes
    assert note.startswith("deepracer-0-robomaker-1 holds a GPU and has run no GPU process")
    assert late.ok  # a note only


def test_on_a_worker_a_task_stopped_here_and_not_replaced_here_is_a_warning() -> None:
    idle = Inventory(gpus=(replace(WORKING, processes=()),))

    def task(id_: str, name: str, state: str, started: float) -> ContainerFacts:
        labels = {**SIMULATOR.labels, "com.docker.swarm.task.name": f"deepracer-0_{name}.{id_}"}
        return replace(
            SIMULATOR,
            id=id_,
            name=f"deepracer-0_{name}.{id_}",
            state=state,
            exit_code=None if state == "running" else 137,
            labels=labels,
            started_at=started,
        )

    killed = task("k", "robomaker.1", "exited", STARTED)
    status = build_status(idle, [killed], [], {})
    [warning] = status.warnings
    assert (warning.kind, warning.facts["container"]) == ("task-unjudged", killed.name)
    assert warning.message.startswith(f"run 0 service robomaker ({killed.name}) exited with")
    assert "cannot tell whether Swarm replaced" in warning.message
    assert status.violations == () and not status.ok
    # replaced here (a newer one of its slot runs), or an older one of a slot: passing
    older = task("o", "robomaker.2", "exited", STARTED - 60)
    newer = task("n", "robomaker.2", "exited", STARTED)
    rerun = task("r", "robomaker.1", "running", STARTED + 60)
    found = build_status(idle, [killed, rerun, older, newer], [], {}).findings
    assert [f.facts["container"] for f in found] == [newer.name]
