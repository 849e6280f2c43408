"""The status board (drgpu/ui draws it): a row per GPU in nvidia-smi order, under it what
runs there, every violation marked where it happens; a lost GPU keeps its row, with the
containers given a GPU NVML no longer lists."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from drgpu.core import labels
from drgpu.core.gpu_usage import ProcessStatus, Status, Verdict
from drgpu.core.model import Gpu
from drgpu.core.swarm_view import SwarmState, may_run, task_gpus

_HOST_NAMES = {Verdict.DISPLAY: "host (display)", Verdict.UNKNOWN: "? (not visible here)"}


@dataclass(frozen=True)
class Occupant:
    """A container given a GPU, or a process found there, by its names, longest first (`run 0
    · trainer · sagemaker`, `0 · trainer · sagemaker`, `0 · sagemaker`); a stray process whose
    command /proc shows, by its user and command alone."""

    names: tuple[str, ...]
    pid: int | None = None
    memory_mib: int | None = None
    problem: str = ""

    @property
    def by_command(self) -> bool:
        """Named by its command line (cut to fit, never shortened)."""
        return len(self.names) == 1


def _names(run_id: str | None, role: str, name: str) -> tuple[str, ...]:
    short = run_id if run_id is not None else "-"
    run = f"run {run_id}" if run_id is not None else "no run"
    return (f"{run} · {role} · {name}", f"{short} · {role} · {name}", f"{short} · {name}")


@dataclass(frozen=True)
class GpuRow:
    """One GPU and what runs on it."""

    gpu: Gpu
    problems: tuple[str, ...]  # short: `lost (gpu_is_lost)`, `held by runs 0, 7`
    occupants: tuple[Occupant, ...]
    utilization_history: tuple[int, ...] = ()  # oldest first, one point per history step
    memory_history: tuple[int, ...] = ()  # percent of the total, likewise


def memory_percent(gpu: Gpu) -> int:
    """Used memory in percent of the total, at most 100 (0 when the total is unknown)."""
    total = gpu.memory_total_mib
    return round(100 * min(1.0, gpu.memory_used_mib / total)) if total > 0 else 0


@dataclass(frozen=True)
class Board:
    """Every GPU row, a line per other node of a swarm, and every violation in full."""

    scope: str
    gpus: tuple[GpuRow, ...]
    problems: tuple[str, ...]
    notes: tuple[str, ...]  # `WARNING: ...` (said, no violation), then `note: ...`
    nodes: tuple[str, ...] = ()


def build_board(status: Status, history: History | None = None) -> Board:
    """The live view of one snapshot (of one run's containers, with a run filter)."""
    roles = {c.name: c.labels.get(labels.ROLE) or "-" for c in status.containers}
    history = history or History({}, {})
    rows = tuple(_row(status, gpu, roles, history) for gpu in status.inventory.gpus)
    scope = f"run {status.run_id}" if status.run_id is not None else "every drgpu run"
    return Board(
        scope=scope,
        gpus=rows,
        problems=tuple(v.message for v in status.violations),
        notes=(
            *(f"WARNING: {w.message}" for w in status.warnings),
            *(f"note: {note}" for note in status.notes),
        ),
        nodes=_node_lines(status.swarm, status.run_id) if status.swarm else (),
    )


def _node_lines(swarm: SwarmState, run_id: str | None) -> tuple[str, ...]:
    """A line per other node of the swarm: its role, state, availability unless active,
    whether its GPUs were read there (or why not), and the tasks of drgpu's runs there."""
    lines = []
    for node in (node for node in swarm.nodes if node.id != swarm.here):
        tasks = [
            f"{task.service}.{task.slot} on {','.join(task_gpus(task)) or 'no GPU'}"
            for task in swarm.tasks
            if task.node_id == node.id and may_run(task) and run_id in (None, task.run_id)
        ]
        why = swarm.unseen_why.get(node.id)
        read = "GPUs read there" if node.id in swarm.seen else "GPUs not read"
        read += f" ({why})" if why and node.id not in swarm.seen else ""
        state = (
            node.state if node.availability == "active" else f"{node.state}, {node.availability}"
        )
        lines.append(
            f"{node.name}, {node.role}, {state}, {read}: "
            + ("; ".join(tasks) or "no task of a run")
        )
    return tuple(lines)


def _row(status: Status, gpu: Gpu, roles: Mapping[str, str], history: History) -> GpuRow:
    index = gpu.index
    holders = [h for h in status.holders.get(index, ()) if status.run_id in (None, h.run_id)]
    here = [p for p in status.processes if p.gpu.index == index]
    vanished = {f.facts.get("container") for f in status.findings if f.kind == "processes-vanished"}
    occupants: list[Occupant] = []
    shown: set[int] = set()
    for holder in holders:
        mine = [p for p in here if p.container == holder.container]
        shown.update(p.pid for p in mine)
        name = f"{holder.service} (forwards it)" if holder.forwarded else holder.service
        occupants += [_occupant(p) for p in mine] or [
            Occupant(  # no process on its GPU (yet, or any more: `vanished`)
                _names(holder.run_id, roles.get(holder.container, "-"), name),
                problem="GPU PROCESSES VANISHED" if holder.container in vanished else "",
            )
        ]
    occupants += [_occupant(p) for p in here if p.pid not in shown]
    problems = []
    if gpu.lost:
        problems.append(f"lost ({gpu.error})")
        lost = [g.index for g in status.inventory.gpus if g.lost]
        if index == lost[0]:  # the containers given a GPU NVML does not list: which lost
            # one each had, NVML no longer tells
            more = "" if len(lost) == 1 else f" (one of GPUs {', '.join(map(str, lost))})"
            occupants += [
                Occupant(
                    _names(
                        f.facts.get("run_id"),
                        roles.get(f.facts.get("container", ""), "-"),
                        f.facts.get("service") or "",
                    ),
                    problem=f"MISSING-GPU: given {f.facts['gpu_uuid']}{more}",
                )
                for f in status.violations
                if f.kind == "missing-gpu"
            ]
    elif gpu.processes_unknown:
        problems.append("processes unknown")
    if any(f.kind == "shared-gpu" and f.facts.get("gpu_index") == index for f in status.findings):
        runs = sorted({h.run_id for h in status.holders.get(index, ())})
        problems.append(f"held by runs {', '.join(runs)}")
    return GpuRow(
        gpu,
        tuple(problems),
        tuple(occupants),
        history.utilization.get(gpu.uuid, ()),
        history.memory.get(gpu.uuid, ()),
    )


def _occupant(process: ProcessStatus) -> Occupant:
    flagged = process.verdict in (Verdict.WRONG_GPU, Verdict.STRAY)
    name = process.service
    if name is None:
        name = _HOST_NAMES.get(process.verdict, process.container or "host")
    stray = process.verdict == Verdict.STRAY and process.command
    return Occupant(
        (f"{process.user or '?'} · {process.command}",)
        if stray
        else _names(process.run_id, process.role or "-", name),
        pid=process.pid,
        memory_mib=process.used_memory_mib,
        problem=f"{process.verdict.upper()}: {process.reason}" if flagged else "",
    )


# --- A short history per GPU (utilisation and memory over the last minutes) ------------

HISTORY_POINTS = 20
HISTORY_STEP_S = 6.0  # one point per 6 s: 20 points are the last two minutes


@dataclass(frozen=True)
class History:
    """The last `HISTORY_POINTS` percentages of each GPU's utilisation and memory, by UUID,
    oldest first; a point is taken every `every` refreshes."""

    utilization: Mapping[str, tuple[int, ...]]
    memory: Mapping[str, tuple[int, ...]]
    every: int = 1
    refreshes: int = 0


def new_history(interval_s: float) -> History:
    """An empty history taking a point per HISTORY_STEP_S (at most one per refresh)."""
    return History({}, {}, every=max(1, round(HISTORY_STEP_S / interval_s)))


def recorded(history: History, status: Status) -> History:
    """The history with this refresh's point (at the first refresh, then every `every`-th);
    a GPU no longer listed, or lost, keeps no history."""
    refreshes = history.refreshes + 1
    if history.refreshes % history.every:
        return replace(history, refreshes=refreshes)
    utilization: dict[str, tuple[int, ...]] = {}
    memory: dict[str, tuple[int, ...]] = {}
    for gpu in (gpu for gpu in status.inventory.gpus if gpu.uuid and not gpu.lost):
        busy = gpu.utilization_gpu_percent or 0
        utilization[gpu.uuid] = (*history.utilization.get(gpu.uuid, ()), busy)[-HISTORY_POINTS:]
        used = memory_percent(gpu)
        memory[gpu.uuid] = (*history.memory.get(gpu.uuid, ()), used)[-HISTORY_POINTS:]
    return replace(history, utilization=utilization, memory=memory, refreshes=refreshes)
