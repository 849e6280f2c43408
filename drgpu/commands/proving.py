"""The proof of a started stack: once its containers (or Swarm tasks) run and settle, each
matches the plan (`core.verification`) and drgpu's probe, run inside each GPU container
meanwhile, sees exactly its planned GPUs; else the last log lines of each that stopped."""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING

from drgpu.core import labels
from drgpu.core.compose_progress import verification_events
from drgpu.core.cuda_verdict import judge, probe_arguments
from drgpu.core.facts import ContainerFacts, TaskFacts
from drgpu.core.findings import Finding, Level
from drgpu.core.model import Plan
from drgpu.core.swarm_view import task_stand_in
from drgpu.core.verification import (
    stack_service_name,
    stopped_badly,
    stuck_hint,
    verify,
    verify_tasks,
    waiting_on,
)
from drgpu.errors import DockerError
from drgpu.host import engine, swarm_engine
from drgpu.host.files import probe_source

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from drgpu.core.compose_progress import ProgressEvent
    from drgpu.core.service_gpus import SwarmStack


LOG_TAIL_LINES = 5
SETTLE_S = 0.25
START_TIMEOUT_S = 180.0
STUCK_GRACE_S = 5.0
POLL_S = 0.05  # a few cheap API calls; every 0.05 s of waiting counts in `up`


def verified(
    plan: Plan, progress: Callable[[ProgressEvent], None]
) -> tuple[list[ContainerFacts], list[Finding]]:
    """The started stack's containers once `settle`d and proven (and a warning for each not
    provable from inside); else a DockerError naming every difference and the stopped ones' logs."""
    containers = engine.project_containers(plan.project)
    inside = proving_inside(containers)
    if settle(containers):
        containers = engine.project_containers(plan.project)
    unproven, mismatches = inside()
    problems = [*verify(plan, containers), *mismatches]
    for event in verification_events([(c.name, c.service) for c in containers], problems):
        progress(event)
    if not problems:
        return containers, unproven
    why = "the stack was brought back down; `drgpu doctor` checks the host"
    raise _mismatch("started", problems, [*stopped_logs(plan, containers), why])


def _mismatch(stack: str, problems: list[str], hints: list[str]) -> DockerError:
    return DockerError(
        f"the {stack} stack does not match the plan: {'; '.join(problems)}",
        hint="\n  ".join(hints),
    )


def settle(containers: Iterable[ContainerFacts]) -> bool:
    """Wait until the last container to start has run for SETTLE_S (one failing at once has
    stopped by then); whether it waited (the facts are stale)."""
    starts = [c.started_at for c in containers if c.started_at is not None and not c.stopped]
    wait = SETTLE_S - (time.time() - max(starts)) if starts else 0.0
    if wait <= 0:
        return False
    time.sleep(min(wait, SETTLE_S))
    return True


def proving_inside(
    containers: Iterable[ContainerFacts],
) -> Callable[[], tuple[list[Finding], list[str]]]:
    """Start drgpu's probe in each running GPU container, in a thread each; the function
    returned waits for them: their warnings (`_sorted`) and mismatches."""
    from concurrent.futures import ThreadPoolExecutor  # lazy: only `up` proves

    chosen = [c for c in containers if labels.given_gpus(c) and not c.stopped]
    pool = ThreadPoolExecutor(max_workers=max(len(chosen), 1))
    futures = [pool.submit(_judged, c, partial(probe_in, c, _arguments(c))) for c in chosen]
    pool.shutdown(wait=False)
    return lambda: _sorted([future.result() for future in futures])


def _sorted(verdicts: list[tuple[Finding, ...]]) -> tuple[list[Finding], list[str]]:
    """The warnings (not provable from inside) and the mismatches of the probes' verdicts."""
    findings = [finding for verdict in verdicts for finding in verdict]
    return [f for f in findings if f.level is Level.WARN], [
        f"{f.subject}: seen from inside, {f.message}" for f in findings if f.level is Level.FAIL
    ]


def _arguments(container: ContainerFacts) -> list[str]:
    return probe_arguments(labels.given_gpus(container))


def _judged(container: ContainerFacts, ran: Callable[[], tuple[int, str]]) -> tuple[Finding, ...]:
    """The verdict on what the probe saw in `container`; a warning when it could not run,
    with the Swarm task's name (`<service>.<slot>.<id>`) as its fact `task` where it is one."""
    try:
        return judge(container, *ran()).findings
    except DockerError as exc:
        task = container.labels.get(labels.SWARM_TASK_NAME)
        why = f"not provable from inside: {exc.message}"
        return (Finding(container.name, Level.WARN, why, facts={"task": task} if task else {}),)


def probes_elsewhere(
    project: str, tasks: list[TaskFacts]
) -> list[tuple[ContainerFacts, Callable[[], tuple[int, str]]]]:
    """Each task on another node as a container (`task_stand_in`), with what drgpu's probe
    saw beside it in a one-shot Swarm job per node: (exit code, output), or a DockerError."""
    if not tasks:
        return []
    stand_ins = {task.id: task_stand_in(project, task) for task in tasks}
    wanted: dict[str, dict[str, list[str]]] = {}
    for task in tasks:
        wanted.setdefault(task.node_id, {})[task.id] = _arguments(stand_ins[task.id])
    images = {task.node_id: task.image for task in tasks}  # a task's own image on each node
    seen, failures = swarm_engine.proofs_on_nodes(project, probe_source(), wanted, images)

    def ran(task: TaskFacts) -> tuple[int, str]:
        if task.id in seen:
            return seen[task.id]
        why = failures.get(task.node_id) or "the proof job found no container of it there"
        raise DockerError(why)

    return [(stand_ins[task.id], partial(ran, task)) for task in tasks]


def probe_in(container: ContainerFacts, arguments: list[str]) -> tuple[int, str]:
    """Run drgpu's probe in `container`: its exit code and output."""
    return engine.run_probe_in(container.id, probe_source(), arguments)


def stopped_logs(plan: Plan, containers: Iterable[ContainerFacts]) -> list[str]:
    """The last log lines of each container whose state fails verification."""
    return [
        _shown(c.name, engine.container_log_tail(c.id, LOG_TAIL_LINES))
        for c, _why in stopped_badly(plan, containers)
    ]


def _shown(name: str, tail: list[str]) -> str:
    shown = "".join(f"\n    | {line}" for line in tail) or "\n    | (no output)"
    return f"last lines of {name}:{shown}"


def proven_tasks(plan: Plan, stack: SwarmStack) -> tuple[list[TaskFacts], list[Finding]]:
    """The deployed `stack`'s running tasks, once all run and `settle`d, proven as `verified`
    proves containers; else a DockerError with the last log lines of each task that ended."""
    project = plan.project
    before = {task.id for task in _wait_running(stack) if task.state == "running"}
    containers = swarm_engine.stack_containers(project)
    inside = proving_inside(containers.values())
    settle(containers.values())  # a task whose command fails at once has ended
    tasks = swarm_engine.stack_tasks(project)  # the manager's word, of every node's tasks
    containers = swarm_engine.stack_containers(project)
    gpu = {stack_service_name(project, s.name) for s in stack.services if s.gpus or s.pinned}
    ended = [  # a task without a GPU may complete (DRfC's evaluation rl_coach does)
        task
        for task in tasks
        if task.id in before
        and task.state != "running"
        and (task.state != "complete" or task.service in gpu)
    ]
    unproven, mismatches = inside()
    problems = [
        *waiting_on(stack, tasks)[0],
        *(f"{_name(task)} {task.state}: {task.error or 'its command ended'}" for task in ended),
        *(f"{c.name}: {why}" for c, why in stopped_badly(plan, containers.values())),
        *verify_tasks(stack, tasks, containers),
        *mismatches,
    ]
    running = [task for task in tasks if task.state == "running"]
    if not problems:
        remote = [t for t in running if t.service in gpu and t.id not in containers]
        elsewhere, problems = _sorted([_judged(*p) for p in probes_elsewhere(project, remote)])
        unproven += elsewhere
    if problems:
        logs = [_task_logs(task) for task in ended if task.id not in containers]
        why = "the stack was removed; `drgpu swarm-setup` checks a node's GPU resources"
        raise _mismatch(
            "deployed", problems, [*stopped_logs(plan, containers.values()), *logs, why]
        )
    return running, unproven


def _name(task: TaskFacts) -> str:
    return f"{task.service}.{task.slot}"


def _task_logs(task: TaskFacts) -> str:
    return _shown(_name(task), swarm_engine.task_log_tail(task.id, LOG_TAIL_LINES))


def _wait_running(stack: SwarmStack) -> list[TaskFacts]:
    deadline = time.monotonic() + START_TIMEOUT_S
    stuck_since: float | None = None
    while True:
        tasks = swarm_engine.stack_tasks(stack.project)
        waiting, stuck = waiting_on(stack, tasks)
        if not waiting:
            return tasks
        now = time.monotonic()
        stuck_since = (stuck_since or now) if stuck else None
        if stuck_since is not None and now - stuck_since >= STUCK_GRACE_S:
            failed = {task.service: task for task in tasks if task.state == "failed"}
            raise DockerError(
                f"the stack cannot start: {'; '.join(sorted(set(stuck)))}",
                hint="\n  ".join([*map(_task_logs, failed.values()), stuck_hint(stuck)]),
            )
        if now >= deadline:
            raise DockerError(f"the stack did not start in {START_TIMEOUT_S:.0f}s: {waiting[0]}")
        time.sleep(POLL_S)
