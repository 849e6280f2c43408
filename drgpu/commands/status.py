"""`drgpu status`: read NVML, the engine's containers and each GPU process's cgroup, and judge
them (`core.gpu_usage` judges).

A watch keeps one NVML session and one engine connection open, and per tick makes one
cheap listing call; it inspects a container only when it first appears (the facts it
needs never change while the container exists, except its state, which the listing has).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from drgpu.commands.options import InputOptions, resolved, run_id_of
from drgpu.core import labels
from drgpu.core.gpu_usage import LAUNCHER_ROLE, Status, build_status
from drgpu.core.settings import run_key
from drgpu.errors import CheckFailedError
from drgpu.host import engine, nvml
from drgpu.host.cgroups import read_cgroup
from drgpu.host.procs import read_process
from drgpu.host.signals import Interrupted
from drgpu.ui.live import watch_display

if TYPE_CHECKING:
    from drgpu.core.facts import ContainerFacts
    from drgpu.host.engine import EngineSession


@dataclass(frozen=True)
class StatusOptions:
    """`drgpu status`'s options: `run_id` (None: every run; with `evaluation` the run's
    evaluation, DR_RUN_ID of the settings without it), and with `watch` a refresh every
    `interval_s` (`count` times; each a JSON line with `json_lines`)."""

    run_id: str | None = None
    evaluation: bool = False
    watch: bool = False
    interval_s: float = 1.0
    count: int | None = None
    json_lines: bool = False


@dataclass(frozen=True)
class StatusResult:
    """The last snapshot (None: a watch stopped before the first), and whether a watch
    has shown it already."""

    last: Status | None
    watched: bool

    @property
    def failure(self) -> CheckFailedError | None:
        """The first violation of the last snapshot (exit 6), with how many more."""
        if self.last is None or self.last.ok:
            return None
        violations = self.last.violations
        more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
        return CheckFailedError(f"{violations[0].message}{more}")


def status(options: StatusOptions) -> StatusResult:
    """One snapshot, or a watch shown live until its count or Ctrl-C."""
    run_id = options.run_id
    if options.evaluation:
        settled = run_id or run_id_of(resolved(InputOptions(evaluation=True, needs_files=False)))
        run_id = run_key(settled, evaluation=True)
    with nvml.nvml_session() as session:
        if not options.watch:
            return StatusResult(snapshot(session, run_id), watched=False)

        with watch_display(json_lines=options.json_lines, interval_s=options.interval_s) as show:
            last = watch(session, run_id, show, options.interval_s, options.count)
    return StatusResult(last, watched=True)


class Reader:
    """Reads snapshots through an open NVML session and engine connection, remembering
    the facts of each drgpu container (and SageMaker trainer) by id."""

    def __init__(self, session: Any, connection: EngineSession, run_id: str | None = None) -> None:
        self._nvml = session
        self._engine = connection
        self._run_id = run_id
        self._known: Mapping[str, ContainerFacts] = {}
        self.inspections = 0

    def snapshot(self) -> Status:
        """Read the world once and judge it."""
        inventory = nvml.inventory_from_nvml(self._nvml)
        listed = self._engine.containers()
        mine = [c for c in listed if labels.RUN_ID in c.labels]
        # SageMaker trainers (running `algo-...` containers) are drgpu's only with an rl_coach.
        launcher = any(c.labels.get(labels.ROLE) == LAUNCHER_ROLE for c in mine)
        trainers = [c for c in listed if launcher and c.state == "running" and "algo-" in c.name]
        self._known = self._refreshed([*mine, *trainers])
        ours, sagemaker = (
            [replace(self._known[c.id], state=c.state) for c in group if c.id in self._known]
            for group in (mine, trainers)
        )
        others = [c for c in listed if c.state == "running"]
        pids = {proc.pid for gpu in inventory.gpus for proc in gpu.processes}
        cgroups = {pid: read_cgroup(pid) for pid in pids}
        commands = {pid: read_process(pid) for pid in pids}
        return build_status(
            inventory, ours, others, cgroups, self._run_id, sagemaker=sagemaker, commands=commands
        )

    def _refreshed(self, listed: list[ContainerFacts]) -> dict[str, ContainerFacts]:
        """The facts of the listed containers: those already known, and an inspection of
        each new one (one that vanished meanwhile is left out)."""
        known = {c.id: self._known[c.id] for c in listed if c.id in self._known}
        for container in listed:
            if container.id not in known:
                self.inspections += 1
                facts = self._engine.inspect(container.id)
                if facts is not None:
                    known[container.id] = facts
        return known


def snapshot(session: Any, run_id: str | None = None) -> Status:
    """One snapshot through an initialised NVML session."""
    with engine.engine_session() as connection:
        return Reader(session, connection, run_id).snapshot()


def watch(
    session: Any,
    run_id: str | None,
    show: Callable[[Status], None],
    interval_s: float,
    count: int | None = None,
) -> Status | None:
    """Show a fresh snapshot every `interval_s` (at a fixed rate) until `count` snapshots or
    Ctrl-C; the last snapshot (None when interrupted before the first)."""
    last = None
    shown = 0
    try:
        with engine.engine_session() as connection:
            reader = Reader(session, connection, run_id)
            start = time.monotonic()
            while count is None or shown < count:
                if shown:
                    time.sleep(max(0.0, start + shown * interval_s - time.monotonic()))
                last = reader.snapshot()
                show(last)
                shown += 1
    except KeyboardInterrupt:
        pass
    except Interrupted as stop:  # Ctrl-C ends a watch; SIGTERM and SIGHUP still interrupt it
        if stop.signum != signal.SIGINT:
            raise
    return last
