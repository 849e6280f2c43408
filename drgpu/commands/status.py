"""`drgpu status`: read NVML, the engine's containers and each GPU process's cgroup;
`core.gpu_usage` judges them. A watch (docs/metrics.md) makes one listing call per refresh,
inspecting a container and reading a process's /proc files only when it first appears.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from drgpu.commands.options import resolved, run_id_of
from drgpu.core import labels
from drgpu.core.drfc_scripts import is_sagemaker_local
from drgpu.core.facts import ContainerFacts, ProcessFacts
from drgpu.core.faults import with_faults
from drgpu.core.findings import Level
from drgpu.core.gpu_usage import FACTS, LAUNCHER_ROLE, Status, build_status
from drgpu.core.inputs import InputOptions
from drgpu.core.model import GpuHealth, Inventory
from drgpu.core.settings import run_key
from drgpu.core.swarm_view import SwarmState, swarm_findings, task_containers
from drgpu.errors import CheckFailedError, ConfigError, DockerError, NvmlUnavailableError
from drgpu.host import docker_api, engine, nvml, swarm_engine
from drgpu.host.files import probe_source
from drgpu.host.procs import process_key, read_cgroup, read_process
from drgpu.host.signals import Interrupted
from drgpu.ui.live import watch_display
from drgpu.ui.talk import note, warn

if TYPE_CHECKING:
    from drgpu.core.metrics import Sample
    from drgpu.host.cost_file import CostKeeper
    from drgpu.host.docker_api import Connection


@dataclass(frozen=True)
class StatusOptions:
    """`drgpu status`'s options (`run_id` None: every run; with `evaluation`, the evaluation of
    `run_id`, else of DR_RUN_ID)."""

    run_id: str | None = None
    evaluation: bool = False
    watch: bool = False
    interval_s: float = 1.0
    count: int | None = None
    json_lines: bool = False
    influx: str | None = None  # with watch: line protocol to this URL
    prometheus: str | None = None  # with watch: /metrics on this [ADDRESS:]PORT
    on_violation: str | None = None  # with watch: a command per new violation


@dataclass(frozen=True)
class StatusResult:
    """The last snapshot (None: a watch stopped before the first); whether a watch showed it."""

    last: Status | None
    watched: bool

    @property
    def failure(self) -> CheckFailedError | None:
        """The first violation of the last snapshot (exit 6), with how many more."""
        violations = self.last.violations if self.last else ()
        if not violations:
            return None  # warnings are said, but exit 0
        n = len(violations) - 1
        more = f" (and {n} more violation{'s' * (n > 1)})" if n else ""
        return CheckFailedError(f"{violations[0].message}{more}")


def status(options: StatusOptions) -> StatusResult:
    """One snapshot, or a watch shown live until its count or Ctrl-C."""
    exporting = (options.influx, options.prometheus, options.on_violation)
    if not options.watch and any(option is not None for option in exporting):
        raise ConfigError("--influx, --prometheus and --on-violation need --watch")
    run_id = options.run_id
    if options.evaluation:
        settled = run_id or run_id_of(resolved(InputOptions(evaluation=True, needs_files=False)))
        run_id = run_key(settled, evaluation=True)
    costs = _cost_keeper(options) if options.watch else None
    with exports(options, costs) as sinks, nvml.nvml_session() as session:
        if not options.watch:
            with docker_api.connected() as connection:
                reader = Reader(session, connection, run_id, swarm_reader(connection))
                return StatusResult(reader.snapshot(), watched=False)

        with watch_display(json_lines=options.json_lines, interval_s=options.interval_s) as show:
            last = watch(session, run_id, show, options.interval_s, options.count, sinks, costs)
    return StatusResult(last, watched=True)


def _cost_keeper(options: StatusOptions) -> CostKeeper:
    """The ledger beside the settings file (kept in memory alone where it cannot be)."""
    from drgpu.host.cost_file import CostKeeper, ledger_path  # lazy: only a watch keeps it

    try:
        path = ledger_path(resolved(InputOptions(needs_files=False)).env_file)
        return CostKeeper(path, options.interval_s, warn)
    except ConfigError as exc:
        warn(f"GPU cost is not kept on disk: {exc.message}")
        return CostKeeper(None, options.interval_s, warn)


class Reader:
    """Reads snapshots, remembering the facts of each drgpu container and trainer by id."""

    def __init__(
        self,
        session: Any,
        connection: Connection,
        run_id: str | None = None,
        swarm: Callable[[], SwarmState | None] = lambda: None,
    ) -> None:
        self._nvml = session
        self._engine = connection
        self._run_id = run_id
        self._swarm = swarm
        self._known: Mapping[str, ContainerFacts] = {}
        self._had_processes: frozenset[str] = frozenset()
        self._procs: dict[int, tuple[int | None, str | None, ProcessFacts | None]] = {}
        self.restart_nvml = False  # start NVML again first (it failed at the last refresh)
        self.events: nvml.EventFollower | None = None  # a watch's
        self.health: tuple[GpuHealth, ...] = ()

    def snapshot(self) -> Status:
        """Read the world once and judge it."""
        inventory = nvml.watched_inventory(self._nvml, restart=self.restart_nvml)
        listed = engine.listing(self._engine)
        mine = [c for c in listed if labels.RUN_ID in c.labels]
        # SageMaker trainers (running `algo-...` containers) are drgpu's only with an rl_coach.
        launcher = any(c.labels.get(labels.ROLE) == LAUNCHER_ROLE for c in mine)
        running = [c for c in listed if c.state == "running"]
        trainers = [c for c in running if launcher and is_sagemaker_local(c)]
        # Each new container, or one whose state changed, is inspected (one gone meanwhile
        # left out): a stopped one's exit code is read once.
        seen = {
            c.id: known
            if (known := self._known.get(c.id)) and known.state == c.state
            else engine.inspected(self._engine, c.id)
            for c in mine + trainers
        }
        self._known = {id_: facts for id_, facts in seen.items() if facts is not None}
        ours, sagemaker = (
            [replace(self._known[c.id], state=c.state) for c in group if c.id in self._known]
            for group in (mine, trainers)
        )
        self._procs = {p.pid: self._process(p.pid) for gpu in inventory.gpus for p in gpu.processes}
        swarm = self._swarm()
        judged = build_status(
            inventory,
            ours,
            running,
            {pid: read[1] for pid, read in self._procs.items()},
            self._run_id,
            sagemaker=sagemaker,
            commands={pid: read[2] for pid, read in self._procs.items()},
            had_processes=self._had_processes,
            now=time.time(),
            manager=swarm is not None,
        )
        # A container keeps its mark of having had GPU processes while it lives.
        alive = {c.id for c in ours}
        busy = {p.container_id for p in judged.processes if p.container_id and p.run_id is not None}
        self._had_processes = (self._had_processes & alive) | busy
        self.health = nvml.health_from_nvml(self._nvml, len(inventory.gpus))
        follower = self.events
        events = (tuple(follower.events), follower.unsupported) if follower else ((), None)
        judged = with_faults(judged, self.health, *events)
        if swarm is None:
            return judged
        # Each status finding has every FACTS key (the exporters and --on-violation read them).
        judging = (
            replace(f, facts={**dict.fromkeys(FACTS), **f.facts})
            for f in swarm_findings(swarm, self._run_id)
        )
        found = sorted([*judged.findings, *judging], key=lambda f: f.level != Level.FAIL)
        return replace(judged, findings=tuple(found), swarm=swarm)

    def _process(self, pid: int) -> tuple[int | None, str | None, ProcessFacts | None]:
        """A GPU process's /proc key, cgroup file and command, read once per process."""
        key, known = process_key(pid), self._procs.get(pid)
        if key is not None and known is not None and known[0] == key:
            return known
        return key, read_cgroup(pid), read_process(pid)


def swarm_reader(
    connection: Connection, interval_s: float = 0.0
) -> Callable[[], SwarmState | None]:
    """Reads the swarm at each call (None: no swarm manager), and every other ready node's
    GPUs there in the image of one of drgpu's tasks (else DRGPU_NODE_IMAGE's), at most once
    per NODE_READ_S or `interval_s`; a reading older than 3 rounds leaves the node unseen."""
    here: list[str] = []
    period = max(NODE_READ_S, interval_s)
    readings: dict[str, tuple[float, Inventory, dict[int, str]]] = {}
    why: dict[str, str] = {}
    last = [-period]
    unread = "none of drgpu's tasks runs there to read them (DRGPU_NODE_IMAGE)"

    def read() -> SwarmState | None:
        here[:] = here or [swarm_engine.engine_facts().node_id]
        swarm = swarm_engine.swarm_picture(connection, here[0])
        now = time.monotonic()
        if swarm is None:
            return None
        if now - last[0] >= period:
            last[0] = now
            images = {t.node_id: t.image for t in swarm.tasks if t.image and t.state == "running"}
            fallback = os.environ.get("DRGPU_NODE_IMAGE")
            ready = [n.id for n in swarm.nodes if n.id != here[0] and n.state == "ready"]
            wanted = {node: image for node in ready if (image := images.get(node) or fallback)}
            why.update((node, unread) for node in ready if node not in wanted)
            got = swarm_engine.node_gpus(probe_source(), wanted) if wanted else {}
            for node, reading in got.items():
                if isinstance(reading, str):
                    why[node] = reading
                else:
                    readings[node] = (now, *reading)
                    why.pop(node, None)
        fresh = {node: r for node, r in readings.items() if now - r[0] <= 3 * period}
        nodes = {node.id: node for node in swarm.nodes}
        found = [
            replace(
                f,
                subject=f"{nodes[node].name}: {f.subject}",
                message=f"on {nodes[node].name}: {f.message}",
                facts={**f.facts, "node": node},
            )
            for node, (_, inventory, cgroups) in fresh.items()
            if node in nodes
            for f in build_status(inventory, task_containers(swarm, node), [], cgroups).findings
        ]
        seen = (*swarm.seen, *fresh)
        return replace(swarm, seen=seen, node_findings=tuple(found), unseen_why=dict(why))

    return read


NODE_READ_S = 10.0  # the shortest time between two rounds of reading jobs


def watch(
    session: Any,
    run_id: str | None,
    show: Callable[[Status], None],
    interval_s: float,
    count: int | None = None,
    sinks: Sequence[Callable[[Status], None]] = (),
    costs: CostKeeper | None = None,
) -> Status | None:
    """Show a snapshot every `interval_s` until `count` refreshes or Ctrl-C, handing each to
    the `sinks` and `costs`; the last one shown (None: none). A later refresh the engine or
    NVML fails is skipped, said once; NVML is started again after it failed."""
    last = None
    reader = None
    try:
        with docker_api.connected() as connection:
            reader = Reader(session, connection, run_id, swarm_reader(connection, interval_s))
            reader.events = nvml.EventFollower(session)
            nvml_down, engine_down = Outage("NVML"), Outage("the Docker engine")
            start = time.monotonic()
            for shown in itertools.count() if count is None else range(count):
                time.sleep(max(0.0, start + shown * interval_s - time.monotonic()))
                try:
                    last = reader.snapshot()
                except (NvmlUnavailableError, DockerError) as exc:
                    if last is None:
                        raise
                    lost_nvml = isinstance(exc, NvmlUnavailableError)
                    reader.restart_nvml |= lost_nvml
                    (nvml_down if lost_nvml else engine_down).failed(exc.message)
                    continue
                reader.restart_nvml = False
                nvml_down.worked()
                engine_down.worked()
                if costs is not None:
                    costs.charge(last, reader.health)
                for sink in (show, *sinks):
                    sink(last)
    except KeyboardInterrupt:
        pass
    except Interrupted as stop:  # Ctrl-C ends a watch; SIGTERM and SIGHUP still interrupt it
        if stop.signum != signal.SIGINT:
            raise
    finally:
        if reader is not None and reader.events is not None:
            reader.events.close()
        if costs is not None:
            costs.save()
    return last


@dataclass
class Outage:
    """Something a watch depends on: its failure said once, and its return."""

    what: str
    down: bool = False

    def failed(self, message: str) -> None:
        if not self.down:
            warn(f"{message}; {self.what}: retrying at every refresh")
        self.down = True

    def worked(self) -> None:
        if self.down:
            note(f"{self.what} is back")
        self.down = False


@contextmanager
def exports(
    options: StatusOptions, costs: CostKeeper | None = None
) -> Iterator[list[Callable[[Status], None]]]:
    """Where each refresh of a watch goes besides the screen (each checked before it starts)."""
    with ExitStack() as stack:
        senders = [
            sender(value, stack)
            for value, sender in ((options.influx, _influx), (options.prometheus, _prometheus))
            if value is not None
        ]
        sinks: list[Callable[[Status], None]] = []
        if senders:
            from drgpu.core import cost  # lazy: only the watch's exporters need them
            from drgpu.core.metrics import samples

            def export(status: Status) -> None:
                series = [*samples(status), *(cost.samples(costs.ledger) if costs else ())]
                for send in senders:
                    send(series)

            sinks.append(export)
        if options.on_violation is not None:
            sinks.append(_violation_sink(options.on_violation, stack))
        yield sinks


def _influx(url: str, stack: ExitStack) -> Callable[[list[Sample]], None]:
    from drgpu.core.metrics import influx_target, line_protocol  # lazy: only a watch exports
    from drgpu.host.metrics_export import InfluxSender

    target = influx_target(url)
    outage = Outage(f"--influx {target.url}")
    sender = InfluxSender(target, outage.failed, outage.worked, warn)
    stack.callback(sender.close)
    return lambda series: sender.send(line_protocol(series, time.time_ns()))


def _prometheus(address: str, stack: ExitStack) -> Callable[[list[Sample]], None]:
    from drgpu.core.metrics import EVERY_ADDRESS, prometheus_address  # lazy: as above
    from drgpu.host.metrics_export import PrometheusEndpoint

    host, port = prometheus_address(address)
    endpoint = PrometheusEndpoint(host, port)
    stack.callback(endpoint.close)
    shown = f"[{host}]" if ":" in host else host
    everywhere = " (every address: other machines can read them)" if host in EVERY_ADDRESS else ""
    note(f"Prometheus metrics on http://{shown}:{endpoint.port}/metrics{everywhere}")
    return endpoint.publish


def _violation_sink(text: str, stack: ExitStack) -> Callable[[Status], None]:
    from drgpu.core.alerts import AlertState, due  # lazy: only --on-violation needs them
    from drgpu.host.violation_command import ViolationCommand, command_line

    command = ViolationCommand(command_line(text), warn)
    stack.callback(command.close)
    state = AlertState()

    def run(status: Status) -> None:
        nonlocal state
        held_back = state.held_back
        state, alerts = due(state, status, time.monotonic())  # limits: a clock never set back
        for alert in alerts:
            command.run(replace(alert, time=time.time()))
        if state.held_back > held_back:
            warn(
                f"--on-violation: rate limit reached; {state.held_back - held_back} new"
                " violation(s) wait to run it while they last (see docs/metrics.md)"
            )

    return run
