"""The proof of a started stack: wait until its containers (or Swarm tasks) run and settle,
then check each against the plan (`core.verification`), with the last log lines of each
that stopped, and from inside: drgpu's probe, run in each GPU container during the settle,
must see exactly its planned GPUs (NVML and CUDA)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from drgpu import probe
from drgpu.core.compose_progress import verification_events
from drgpu.core.cuda_verdict import CheckResult, expected_uuids, judge, probe_arguments
from drgpu.core.findings import Finding, Level
from drgpu.core.model import Plan
from drgpu.core.verification import (
    stack_service_name,
    state_problems,
    stopped_badly,
    verify,
    verify_tasks,
    waiting_on,
)
from drgpu.errors import DockerError
from drgpu.host import engine, swarm_engine
from drgpu.host.files import Bound, read_bounded

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from drgpu.core.compose_progress import ProgressEvent
    from drgpu.core.facts import ContainerFacts, TaskFacts
    from drgpu.core.service_gpus import SwarmStack


LOG_TAIL_LINES = 5
SETTLE_S = 0.25
START_TIMEOUT_S = 180.0
STUCK_GRACE_S = 5.0
POLL_S = 0.1  # a few cheap API calls; every 0.1 s of waiting counts in `up`


def verified(
    plan: Plan, progress: Callable[[ProgressEvent], None] | None = None
) -> tuple[list[ContainerFacts], list[Finding]]:
    """The containers of the started stack, proven against the plan, and a warning for each
    that could not be proven from inside; a DockerError naming every difference (with the
    last log lines of each container that stopped) if not. `progress` hears whether each
    container was verified.

    A container counts once it has run for SETTLE_S: one whose command fails at once
    has stopped by then."""
    containers = engine.project_containers(plan.project)
    inside = proving_inside(containers)
    if settle(containers):
        containers = engine.project_containers(plan.project)
    unproven, mismatches = inside()
    problems = [*verify(plan, containers), *mismatches]
    if progress is not None:
        for event in verification_events([(c.name, c.service) for c in containers], problems):
            progress(event)
    if not problems:
        return containers, unproven
    raise DockerError(
        f"the started stack does not match the plan: {'; '.join(problems)}",
        hint="\n  ".join(
            [
                *stopped_logs(plan, containers),
                "the stack was brought back down; `drgpu doctor` checks the host",
            ]
        ),
    )


def settle(containers: Iterable[ContainerFacts]) -> bool:
    """Wait until the last container to start has run for SETTLE_S (one whose command
    fails at once has stopped by then); whether it waited, so the facts are stale."""
    starts = [c.started_at for c in containers if c.started_at is not None and not c.stopped]
    wait = SETTLE_S - (time.time() - max(starts)) if starts else 0.0
    if wait <= 0:
        return False
    time.sleep(min(wait, SETTLE_S))
    return True


def proving_inside(
    containers: Iterable[ContainerFacts],
) -> Callable[[], tuple[list[Finding], list[str]]]:
    """Start drgpu's probe in each running GPU container, each in a thread of its own; the
    function returned waits for them: a warning for each container not provable from
    inside (no python3, the probe could not run), and every mismatch the probes saw."""
    from concurrent.futures import ThreadPoolExecutor  # lazy: only `up` proves

    chosen = [c for c in containers if expected_uuids(c) and not c.stopped]
    pool = ThreadPoolExecutor(max_workers=max(len(chosen), 1))
    futures = [pool.submit(_inside, container) for container in chosen]
    pool.shutdown(wait=False)

    def results() -> tuple[list[Finding], list[str]]:
        findings = [finding for future in futures for finding in future.result().findings]
        return [f for f in findings if f.level is Level.WARN], [
            f"{f.subject} (seen from inside): {f.message}"
            for f in findings
            if f.level is Level.FAIL
        ]

    return results


def _inside(container: ContainerFacts) -> CheckResult:
    expected = expected_uuids(container)
    try:
        return judge(container, *probe_in(container, probe_arguments(expected)))
    except DockerError as exc:
        why = Finding(container.name, Level.WARN, f"not provable from inside: {exc.message}")
        return CheckResult(container.service, container.name, expected, (), (), (why,))


def probe_in(container: ContainerFacts, arguments: list[str]) -> tuple[int, str]:
    """Copy drgpu's probe into `container` and run it there: its exit code and output."""
    source = read_bounded(Path(probe.__file__), Bound.OWN, "drgpu's probe")
    ran = engine.run_file_in_container(container.id, source, arguments)
    return ran.exit_code, ran.output


def stopped_logs(plan: Plan, containers: Iterable[ContainerFacts]) -> list[str]:
    """The last log lines of each container whose state fails verification."""
    logs = []
    for container in stopped_badly(plan, list(containers)):
        tail = engine.container_log_tail(container.id, LOG_TAIL_LINES)
        shown = "".join(f"\n    | {line}" for line in tail) or "\n    | (no output)"
        logs.append(f"last lines of {container.name}:{shown}")
    return logs


def proven_tasks(plan: Plan, stack: SwarmStack) -> tuple[list[TaskFacts], list[Finding]]:
    """The running tasks of the deployed `stack`, once every one runs and has run as long
    as a Compose stack's containers must (`proving.settle`), each verified against the
    plan and, on this node, from inside; a warning for each task not proven from inside
    (another node's: this engine cannot look inside it). A DockerError naming every
    difference if not, with the last log lines of each task that stopped or was replaced
    during the settle, as the manager records them."""
    project = plan.project
    before = {task.id for task in _wait_running(stack) if task.state == "running"}
    containers = swarm_engine.stack_containers(project)
    inside = proving_inside(containers.values())
    settle(containers.values())  # a task whose command fails at once has ended
    tasks = swarm_engine.stack_tasks(project)  # the manager's word, of every node's tasks
    containers = swarm_engine.stack_containers(project)
    ended = [task for task in tasks if task.id in before and task.state != "running"]
    unproven, mismatches = inside()
    problems = [
        *waiting_on(stack, tasks)[0],
        *(f"{_name(task)} {task.state}: {task.error or 'its command ended'}" for task in ended),
        *state_problems(plan, containers.values()),
        *verify_tasks(stack, tasks, containers),
        *mismatches,
    ]
    if problems:
        raise DockerError(
            f"the deployed stack does not match the plan: {'; '.join(problems)}",
            hint="\n  ".join(
                [
                    *stopped_logs(plan, containers.values()),
                    *(_task_logs(task) for task in ended if task.id not in containers),
                    "the stack was removed; `drgpu swarm-setup` checks a node's GPU resources",
                ]
            ),
        )
    running = [task for task in tasks if task.state == "running"]
    gpu = {stack_service_name(project, s.name) for s in stack.services if s.gpus or s.pinned}
    unproven += [
        Finding(
            _name(task),
            Level.WARN,
            f"not inspected: it runs on node {task.node_id[:12]}, not this one",
            kind="not-inspected",
        )
        for task in running
        if task.service in gpu and task.id not in containers
    ]
    return running, unproven


def _name(task: TaskFacts) -> str:
    return f"{task.service}.{task.slot}"


def _task_logs(task: TaskFacts) -> str:
    tail = swarm_engine.task_log_tail(task.id, LOG_TAIL_LINES)
    shown = "".join(f"\n    | {line}" for line in tail) or "\n    | (no output)"
    return f"last lines of {_name(task)}:{shown}"


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
        if stuck and now - (stuck_since or now) >= STUCK_GRACE_S:
            failed = {task.service: task for task in tasks if task.state == "failed"}
            raise DockerError(
                f"the stack cannot start: {'; '.join(sorted(set(stuck)))}",
                hint="\n  ".join(
                    [
                        *map(_task_logs, failed.values()),
                        "each GPU task needs a node with the label and free NVIDIA-GPU"
                        " resources: `drgpu swarm-setup` on each node, `docker node update"
                        " --label-add`",
                    ]
                ),
            )
        if now >= deadline:
            raise DockerError(f"the stack did not start in {START_TIMEOUT_S:.0f}s: {waiting[0]}")
        time.sleep(POLL_S)
