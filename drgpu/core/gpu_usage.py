"""`drgpu status` and the holders of `drgpu gpus`: who holds each GPU and who really uses it.

Pure: an inventory, the engine's containers and each GPU process's cgroup file come in, a
`Status` comes out. What a container was given is read from its labels, so nothing goes
stale when a stack is changed by hand. Each violation and warning is a
`core.findings.Finding`, its `facts` the FACTS keys. Violations (FAIL: exit 6): wrong-gpu,
stray, missing-gpu, trainer-gpu, shared-gpu, service-stopped. Warnings (WARN, WARNING_KINDS):
processes-unknown (NVML cannot list a GPU's processes), processes-vanished (a container's GPU
processes of an earlier refresh are gone), service-ended (a GPU service exited with status 0),
task-unjudged (a Swarm task stopped here, on a worker, which cannot see whether it was replaced).
docs/commands.md and docs/nvidia-stack.md say when each is given.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from itertools import groupby
from operator import itemgetter
from typing import Any

from drgpu.core import labels
from drgpu.core.cgroup_owner import owner_from_cgroup
from drgpu.core.drfc_scripts import is_sagemaker_local
from drgpu.core.facts import ContainerFacts, ProcessFacts
from drgpu.core.findings import Finding, Level
from drgpu.core.index_order import cuda_order
from drgpu.core.model import Gpu, GpuProcess, Inventory, Role
from drgpu.core.modes import Sharing, StrEnum
from drgpu.core.swarm_view import SwarmState, replaced

LAUNCHER_ROLE = Role.TRAINER_LAUNCHER.value
LIVE_STATES = ("running", "paused", "restarting")


class Verdict(StrEnum):
    """What a GPU process is to drgpu (a flagged one's verdict is its finding's kind)."""

    OK = "ok"
    UNKNOWN = "unknown"  # not visible from here
    DISPLAY = "display"  # graphics, on the host
    STRAY = "stray"
    WRONG_GPU = "wrong-gpu"


IDLE_NOTE_S = 600.0  # a GPU container idle this long since it started gets a note
FACTS = ("pid", "run_id", "gpu_index", "gpu_uuid", "container", "container_id", "service")
WARNING_KINDS = ("processes-unknown", "processes-vanished", "service-ended", "task-unjudged")


def _finding(kind: str, message: str, **facts: Any) -> Finding:
    """A status finding about its process, else its container, else its GPU."""
    level = Level.WARN if kind in WARNING_KINDS else Level.FAIL
    facts = {**dict.fromkeys(FACTS), **facts}
    pid, container = facts["pid"], facts["container"]
    subject = f"PID {pid}" if pid is not None else container or f"GPU {facts['gpu_index']}"
    return Finding(subject, level, message, kind=kind, facts=facts)


def _of(c: ContainerFacts) -> dict[str, Any]:
    """The facts of a finding about drgpu's container `c`."""
    run_id = c.labels[labels.RUN_ID]
    return {"run_id": run_id, "container": c.name, "container_id": c.id, "service": c.service}


@dataclass(frozen=True)
class Holder:
    """A live drgpu container that was given (or, for rl_coach, forwards) a GPU."""

    run_id: str
    service: str
    container: str
    uuid: str
    forwarded: bool = False


@dataclass(frozen=True)
class ProcessStatus:
    """One GPU process and what it belongs to."""

    pid: int
    gpu: Gpu
    used_memory_mib: int
    kind: str
    verdict: Verdict
    container: str | None = None
    container_id: str | None = None
    run_id: str | None = None
    service: str | None = None
    role: str = ""  # its container's drgpu role (a SageMaker trainer's: trainer)
    reason: str = ""
    message: str = ""
    command: str = ""  # its command line (secrets hidden), where /proc shows it
    user: str = ""  # the host user owning it


@dataclass(frozen=True)
class TrainerCheck:
    """A SageMaker trainer an rl_coach started, against the GPUs that rl_coach forwards."""

    container: ContainerFacts
    visible: tuple[str, ...]  # its CUDA_VISIBLE_DEVICES
    planned: tuple[str, ...]  # what its rl_coach forwards (none: no rl_coach matched)
    launcher: ContainerFacts | None

    @property
    def run_id(self) -> str | None:
        return self.launcher.labels.get(labels.RUN_ID) if self.launcher else None

    @property
    def ok(self) -> bool:
        return bool(self.planned) and self.visible == self.planned

    @property
    def message(self) -> str:
        who = f"SageMaker trainer {self.container.name}"
        shown = ",".join(self.visible) or "<unset>"
        if self.launcher is None:
            return f"{who} has CUDA_VISIBLE_DEVICES={shown}, which no rl_coach of drgpu's forwards"
        return (
            f"{who} of run {self.run_id} has CUDA_VISIBLE_DEVICES={shown},"
            f" but {self.launcher.name} forwards {','.join(self.planned) or 'no GPU'}"
        )


def trainer_checks(
    candidates: Iterable[ContainerFacts], launchers: Iterable[ContainerFacts]
) -> tuple[TrainerCheck, ...]:
    """Each running SageMaker local-mode trainer among `candidates`, matched to its rl_coach
    (`_launchers_of`); a trainer of a run with no live rl_coach, or with none at all, is not
    judged."""
    live = _live_launchers(launchers)
    checks = []
    for trainer in candidates if live else ():
        if trainer.state != "running" or not is_sagemaker_local(trainer):
            continue
        visible = labels.split_list(trainer.environment.get("CUDA_VISIBLE_DEVICES"))
        owners = _launchers_of(trainer, live, visible.__eq__)
        if owners is None:  # its run has no live rl_coach of drgpu's: a stray of it
            continue
        # several of no named run, and none forwarding its GPUs: no launcher
        one = len(owners) == 1 or "RUN_ID" in trainer.environment
        launcher = owners[0] if one or forwarded_uuids(owners[0]) == visible else None
        planned = forwarded_uuids(launcher) if launcher else ()
        checks.append(TrainerCheck(trainer, visible, planned, launcher))
    return tuple(checks)


def _launchers_of(
    trainer: ContainerFacts, live: list[ContainerFacts], fits: Callable[[tuple[str, ...]], bool]
) -> list[ContainerFacts] | None:
    """The live rl_coaches of the run a SageMaker trainer's `RUN_ID` names (None: that run
    has none), else all; narrowed to those whose forwarded GPUs `fits`, where any does."""
    run = trainer.environment.get("RUN_ID")
    named = [c for c in live if run is None or c.labels.get(labels.RUN_ID) == run]
    if not named and run is not None:
        return None
    return [c for c in named if fits(forwarded_uuids(c))] or named


@dataclass(frozen=True)
class Status:
    """What `drgpu status` shows."""

    inventory: Inventory
    holders: Mapping[int, tuple[Holder, ...]]
    containers: tuple[ContainerFacts, ...]
    processes: tuple[ProcessStatus, ...]
    findings: tuple[Finding, ...]  # violations (FAIL), then warnings (WARN)
    notes: tuple[str, ...]
    run_id: str | None = None
    trainers: tuple[TrainerCheck, ...] = ()
    swarm: SwarmState | None = None  # on a swarm manager: its nodes and drgpu's tasks

    @property
    def ok(self) -> bool:
        """Whether nothing was flagged: no violation and no warning."""
        return not self.findings

    @property
    def violations(self) -> tuple[Finding, ...]:
        """The findings that make `drgpu status` exit 6."""
        return tuple(f for f in self.findings if f.level == Level.FAIL)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.level == Level.WARN)


def forwarded_uuids(container: ContainerFacts) -> tuple[str, ...]:
    """The GPUs an rl_coach forwards to the trainer it starts (label, else its environment)."""
    if container.labels.get(labels.ROLE) != LAUNCHER_ROLE:
        return ()
    return labels.split_list(
        container.labels.get(labels.FORWARDED_GPUS)
        or container.environment.get("CUDA_VISIBLE_DEVICES")
    )


def gpu_of(inventory: Inventory, uuid: str) -> Gpu | None:
    """The GPU with this UUID, or the GPU this MIG UUID is a slice of."""
    return next((gpu for gpu in inventory.gpus if gpu.uuid and _covers(gpu, (uuid,))), None)


def holders_by_gpu(
    inventory: Inventory, containers: Iterable[ContainerFacts]
) -> dict[int, tuple[Holder, ...]]:
    """For each GPU index, the live drgpu containers holding it (slices included)."""
    held = [
        (gpu.index, Holder(c.labels.get(labels.RUN_ID, "?"), c.service, c.name, uuid, forwarded))
        for c in _live(containers)
        for uuids, forwarded in ((labels.given_gpus(c), False), (forwarded_uuids(c), True))
        for uuid in uuids
        if (gpu := gpu_of(inventory, uuid)) is not None
    ]
    held.sort(key=itemgetter(0))  # stable: each GPU's holders in container order
    return {index: tuple(h for _, h in group) for index, group in groupby(held, itemgetter(0))}


def _live(containers: Iterable[ContainerFacts]) -> list[ContainerFacts]:
    return [c for c in containers if c.state in LIVE_STATES and labels.RUN_ID in c.labels]


def _live_launchers(containers: Iterable[ContainerFacts]) -> list[ContainerFacts]:
    return [c for c in _live(containers) if c.labels.get(labels.ROLE) == LAUNCHER_ROLE]


def build_status(
    inventory: Inventory,
    drgpu_containers: Iterable[ContainerFacts],
    other_containers: Iterable[ContainerFacts],
    cgroups: Mapping[int, str | None],
    run_id: str | None = None,
    sagemaker: Iterable[ContainerFacts] = (),
    commands: Mapping[int, ProcessFacts | None] | None = None,
    had_processes: Collection[str] = frozenset(),
    now: float | None = None,
    manager: bool = False,
) -> Status:
    """Judge every GPU process by its /proc/<pid>/cgroup text (`cgroups`; None: unreadable)
    and command line (`commands`). `run_id` narrows the view to one run, its GPUs and their
    processes; `sagemaker` (SageMaker trainers, with their environment) replace the
    `other_containers` of the same id; `had_processes` had GPU processes in an earlier
    refresh of a watch; `now` is for the note on long-idle containers (None: no note);
    `manager`: this node is a swarm manager, whose task list judges the Swarm tasks here."""
    ours = sorted(
        (c for c in drgpu_containers if labels.RUN_ID in c.labels),
        key=lambda c: (c.labels[labels.RUN_ID], c.service, c.name),
    )
    by_id = {c.id: c for c in ours}
    sagemaker = tuple(sagemaker)
    others = {c.id: c for c in (*other_containers, *sagemaker) if c.id not in by_id}
    holders = holders_by_gpu(inventory, ours)
    world = (inventory, by_id, others, _live_launchers(ours))
    processes = [
        _judge(gpu, proc, cgroups.get(proc.pid), (commands or {}).get(proc.pid), *world)
        for gpu in inventory.gpus
        if not gpu.lost
        for proc in gpu.processes
    ]
    findings = [_violation(p) for p in processes if p.verdict in (Verdict.WRONG_GPU, Verdict.STRAY)]
    findings += _missing_gpus(inventory, ours) + _stopped(ours, manager)
    trainers = trainer_checks(sagemaker, ours)
    findings += [_trainer_violation(inventory, c) for c in trainers if not c.ok]
    findings += _shared_gpus(inventory, holders, ours)
    vanished, idle = _silent(inventory, ours, processes, had_processes, now)
    findings += _unknown_processes(inventory) + vanished
    notes = [
        f"GPU {gpu.index} is lost ({gpu.error}): NVML cannot read it or its processes"
        for gpu in inventory.gpus
        if gpu.lost
    ]
    notes += idle
    if any(p.verdict == Verdict.UNKNOWN for p in processes):
        notes.append(
            "some GPU processes are not visible here (they ended, or drgpu runs in another"
            " PID namespace: run it on the host, or in a container with --pid host)"
        )
    if run_id is not None:
        ours = [c for c in ours if c.labels[labels.RUN_ID] == run_id]
        mine = {index for index, hs in holders.items() if any(h.run_id == run_id for h in hs)}
        processes = [p for p in processes if p.run_id == run_id or p.gpu.index in mine]
        keep = {p.pid for p in processes}
        findings = [  # of one of its processes, of the run, or (of no process) of its GPUs
            f
            for f in findings
            if (pid := f.facts["pid"]) in keep
            or f.facts["run_id"] == run_id
            or (pid is None and f.facts["run_id"] is None and f.facts["gpu_index"] in mine)
        ]
        trainers = tuple(check for check in trainers if check.run_id == run_id)
        if not ours:
            notes.append(f"no container of run {run_id} is on this engine")
    return Status(
        inventory=inventory,
        holders=holders,
        containers=tuple(ours),
        processes=tuple(processes),
        findings=tuple(findings),
        notes=tuple(notes),
        run_id=run_id,
        trainers=trainers,
    )


def _trainer_violation(inventory: Inventory, check: TrainerCheck) -> Finding:
    """A trainer told other GPUs than its rl_coach forwards; each GPU named as the plan
    names it (`1: NVIDIA GeForce RTX 3090`), a bare number as in the trainer's CUDA order."""
    gpu = next(filter(None, (gpu_of(inventory, uuid) for uuid in check.visible)), None)
    message = check.message
    for known in (g for g in inventory.gpus if g.uuid):
        message = message.replace(known.uuid, f"{known.index}: {known.name}")
    pci = check.container.environment.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID"
    order = tuple(g.index for g in inventory.gpus) if pci else cuda_order(inventory).indices
    named = {g.index: g for g in inventory.gpus}
    meant = [
        f"its {number} is {named[index].index}: {named[index].name}"
        for number in check.visible
        if number.isdigit() and int(number) < len(order) and (index := order[int(number)]) in named
    ]
    if meant:
        which = "PCI bus" if pci else "CUDA's fastest-first"
        message += f" ({'; '.join(meant)}, in {which} order)"
    return _finding(
        "trainer-gpu",
        message,
        run_id=check.run_id,
        gpu_index=None if gpu is None else gpu.index,
        gpu_uuid=None if gpu is None else gpu.uuid,
        container=check.container.name,
        container_id=check.container.id,
    )


def _silent(
    inventory: Inventory,
    containers: list[ContainerFacts],
    processes: list[ProcessStatus],
    had_processes: Collection[str],
    now: float | None,
) -> tuple[list[Finding], list[str]]:
    """Of the running drgpu containers with no process on their GPUs (all listed and seen
    here), a warning for each that had some earlier, and a note for each other one that
    started at least IDLE_NOTE_S ago (`now` None: no such note)."""
    busy = {p.container_id for p in processes}
    unseen = {p.gpu.index for p in processes if p.verdict == Verdict.UNKNOWN}

    def listed(container: ContainerFacts) -> bool:
        gpus = [gpu_of(inventory, uuid) for uuid in labels.given_gpus(container)]
        known = [gpu for gpu in gpus if gpu is not None and not gpu.lost]
        return bool(known) and all(
            not gpu.processes_unknown and gpu.index not in unseen for gpu in known
        )

    silent = [c for c in containers if c.state == "running" and c.id not in busy and listed(c)]
    vanished = [
        _finding(
            "processes-vanished",
            f"run {c.labels[labels.RUN_ID]} service {c.service} ({c.name}) had GPU processes"
            " and has none now, while it runs: unless it ended its work, it lost its GPU"
            " (after `systemctl daemon-reload` with the systemd cgroup driver; inside, NVML"
            f" says 'Unknown Error'): drgpu cuda-check --service {c.service}; drgpu doctor",
            **_of(c),
        )
        for c in silent
        if c.id in had_processes
    ]
    idle = [
        f"{c.name} holds a GPU and has run no GPU process for {int((now - c.started_at) // 60)}"
        f" min since it started: if it should be working, check that it still sees its GPU"
        f" (drgpu cuda-check --service {c.service})"
        for c in silent
        if now is not None
        and c.id not in had_processes
        and c.started_at
        and now - c.started_at >= IDLE_NOTE_S
    ]
    return vanished, idle


def _judge(
    gpu: Gpu,
    proc: GpuProcess,
    cgroup: str | None,
    facts: ProcessFacts | None,
    inventory: Inventory,
    ours: Mapping[str, ContainerFacts],
    others: Mapping[str, ContainerFacts],
    launchers: list[ContainerFacts],
) -> ProcessStatus:
    """A GPU process, by the container its cgroup names, against drgpu's containers (`ours`,
    by id), the engine's others and the live rl_coaches."""
    command, user = (facts.command, facts.user) if facts else ("", "")
    base = ProcessStatus(
        proc.pid, gpu, proc.used_memory_mib, proc.kind, Verdict.OK, command=command, user=user
    )
    if cgroup is None:
        return replace(base, verdict=Verdict.UNKNOWN, reason="not visible from here")
    owner = owner_from_cgroup(cgroup)
    if owner is None and "C" not in proc.kind:
        return replace(base, verdict=Verdict.DISPLAY, reason="graphics, on the host")
    if owner is None:
        return _stray(base, None, "on the host")
    mine, other = ours.get(owner.container_id), others.get(owner.container_id)
    if mine is not None:
        who = f"run {mine.labels[labels.RUN_ID]} service {mine.service}"
        return _placed(inventory, base, mine, mine, who, "given", labels.given_gpus(mine))
    if other is None:
        why = f"in {owner.runtime} container {owner.container_id[:12]}, unknown here"
        return replace(_stray(base, None, why), container_id=owner.container_id)
    if not is_sagemaker_local(other):
        return _stray(base, other, f"in {other.name}, not started by drgpu")
    # A SageMaker local-mode trainer belongs to the run its environment names (a stray of
    # that run when it has no live rl_coach), else to the run whose rl_coach forwards its
    # GPU, else to the only run with an rl_coach; with none (or several), to no stack.
    owners = _launchers_of(other, launchers, lambda uuids: _covers(gpu, uuids))
    if owners is None:
        run = other.environment["RUN_ID"]
        why = f"in SageMaker trainer {other.name} of run {run}, which has no live rl_coach"
        return replace(_stray(base, other, why), run_id=run)
    if len(owners) != 1:
        return _stray(base, other, f"in SageMaker trainer {other.name}, no rl_coach's")
    coach = owners[0]
    who = f"the SageMaker trainer of run {coach.labels[labels.RUN_ID]}'s {coach.service}"
    base = replace(base, role=Role.TRAINER.value, service=f"{coach.service}/{other.name}")
    return _placed(inventory, base, other, coach, who, "forwarded", forwarded_uuids(coach))


def _placed(
    inventory: Inventory,
    base: ProcessStatus,
    owner: ContainerFacts,
    run_of: ContainerFacts,
    who: str,
    how: str,
    uuids: tuple[str, ...],
) -> ProcessStatus:
    """`base` in `owner` (of `run_of`'s run): ok on a GPU it was `how` (`uuids`), else
    wrong-gpu; each GPU named `GPU 1` (`GPU 0 slice MIG-...` for a slice), `no GPU` for none."""
    placed = replace(
        base,
        container=owner.name,
        container_id=owner.id,
        run_id=run_of.labels[labels.RUN_ID],
        service=base.service or owner.service,
        role=base.role or owner.labels.get(labels.ROLE, ""),
    )
    if _covers(base.gpu, uuids):
        return placed
    gpus = ((uuid, gpu_of(inventory, uuid)) for uuid in uuids)
    given = ", ".join(
        uuid if gpu is None else f"GPU {gpu.index}" + (f" slice {uuid}" * (uuid != gpu.uuid))
        for uuid, gpu in gpus
    )
    given = f"{how} {given or 'no GPU'}"
    return replace(
        placed,
        verdict=Verdict.WRONG_GPU,
        reason=given,
        message=f"PID {base.pid} of {who} ({owner.name}) runs on GPU {base.gpu.index}"
        f" ({base.gpu.name}), but was {given}",
    )


def _stray(base: ProcessStatus, container: ContainerFacts | None, reason: str) -> ProcessStatus:
    gpu = base.gpu
    return replace(
        base,
        verdict=Verdict.STRAY,
        container=container.name or None if container else None,
        container_id=container.id if container else None,
        reason=reason,
        message=f"PID {base.pid} on GPU {gpu.index} ({gpu.name}) belongs to no drgpu stack:"
        f" it runs {reason}",
    )


def _covers(gpu: Gpu, uuids: tuple[str, ...]) -> bool:
    """Whether one of `uuids` is the GPU's or one of its slices'."""
    return any(uuid == gpu.uuid or uuid in {m.uuid for m in gpu.mig_devices} for uuid in uuids)


def _violation(p: ProcessStatus) -> Finding:
    return _finding(
        str(p.verdict),
        p.message,
        pid=p.pid,
        run_id=p.run_id,
        gpu_index=p.gpu.index,
        gpu_uuid=p.gpu.uuid,
        container=p.container,
        container_id=p.container_id,
        service=p.service or p.container,
    )


def _unknown_processes(inventory: Inventory) -> list[Finding]:
    return [
        _finding(
            "processes-unknown",
            f"status cannot list processes on GPU {gpu.index} ({gpu.name}):"
            f" {gpu.processes_unknown}; a stray or wrong-GPU process there would go unseen",
            gpu_index=gpu.index,
        )
        for gpu in inventory.gpus
        if gpu.processes_unknown and not gpu.lost
    ]


def _missing_gpus(inventory: Inventory, containers: list[ContainerFacts]) -> list[Finding]:
    return [
        _finding(
            "missing-gpu",
            f"run {c.labels[labels.RUN_ID]} service {c.service} ({c.name}) was given {uuid},"
            " which NVML does not list (a lost GPU?)",
            gpu_uuid=uuid,
            **_of(c),
        )
        for c in _live(containers)
        for uuid in labels.given_gpus(c) + forwarded_uuids(c)
        if gpu_of(inventory, uuid) is None
    ]


def _stopped(containers: list[ContainerFacts], manager: bool) -> list[Finding]:
    """A run's container that stopped: a failure, but a GPU service's exit with status 0 (its
    work may have ended) is a warning; one created (still starting) or being removed is passing.
    A Swarm task's is judged as a task on a manager (`swarm_view`); on a worker, which cannot
    tell whether Swarm replaced it on another node, one Swarm did not replace here is a
    warning (task-unjudged)."""
    found = []
    gone = set() if manager else replaced(containers, None)
    for c in containers:
        task = labels.SWARM_TASK_NAME in c.labels
        if c.state in ("created", "removing") or (task and (manager or c.id in gone)):
            continue
        if (why := c.stop_problem(bool(labels.given_gpus(c) or forwarded_uuids(c)))) is None:
            continue
        kind = "service-ended" if (c.state, c.exit_code) == ("exited", 0) else "service-stopped"
        if task:
            kind = "task-unjudged"
            why += (
                "; this node is no swarm manager and cannot tell whether Swarm replaced its"
                " task on another node: run `drgpu status` on a manager"
            )
        message = f"run {c.labels[labels.RUN_ID]} service {c.service} ({c.name}) {why}"
        found.append(_finding(kind, message, **_of(c)))
    return found


def _shared_gpus(
    inventory: Inventory,
    holders: Mapping[int, tuple[Holder, ...]],
    containers: list[ContainerFacts],
) -> list[Finding]:
    """A GPU held by live containers of several runs, unless all of them time-slice."""
    sharing = {
        c.labels[labels.RUN_ID]: c.labels.get(labels.SHARING, Sharing.EXCLUSIVE) for c in containers
    }
    return [
        _finding(
            "shared-gpu",
            f"GPU {gpu.index} ({gpu.name}) is held by runs {', '.join(runs)}"
            " at once, and not every one of them shares by time-slicing",
            gpu_index=gpu.index,
            gpu_uuid=gpu.uuid,
        )
        for gpu in inventory.gpus
        if len(runs := sorted({h.run_id for h in holders.get(gpu.index, ())})) > 1
        and any(sharing.get(run) != Sharing.TIMESLICE for run in runs)
    ]
