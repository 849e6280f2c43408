"""The proof of a started stack: wait until its containers (or Swarm tasks) run and settle,
then check each against the plan (`core.verification`), with the last log lines of each
that stopped."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from drgpu.core.compose_progress import verification_events
from drgpu.core.model import Plan
from drgpu.core.verification import (
    state_problems,
    stopped_badly,
    stuck_hint,
    verify,
    verify_tasks,
    waiting_on,
)
from drgpu.errors import DockerError
from drgpu.host import engine, swarm_engine

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
) -> list[ContainerFacts]:
    """The containers of the started stack, proven against the plan; a DockerError naming
    every difference (with the last log lines of each container that stopped) if not.
    `progress` hears whether each container was verified.

    A container counts once it has run for SETTLE_S: one whose command fails at once
    has stopped by then."""
    containers = engine.project_containers(plan.project)
    if settle(containers):
        containers = engine.project_containers(plan.project)
    problems = verify(plan, containers)
    if progress is not None:
        for event in verification_events([(c.name, c.service) for c in containers], problems):
            progress(event)
    if not problems:
        return containers
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


def stopped_logs(plan: Plan, containers: Iterable[ContainerFacts]) -> list[str]:
    """The last log lines of each container whose state fails verification."""
    logs = []
    for container in stopped_badly(plan, list(containers)):
        tail = engine.container_log_tail(container.id, LOG_TAIL_LINES)
        shown = "".join(f"\n    | {line}" for line in tail) or "\n    | (no output)"
        logs.append(f"last lines of {container.name}:{shown}")
    return logs


def proven_tasks(plan: Plan, stack: SwarmStack) -> list[TaskFacts]:
    """The running tasks of the deployed `stack`, once every one runs and has run as long
    as a Compose stack's containers must (`proving.settle`), each verified against the
    plan; a DockerError naming every difference (with the last log lines of each task
    that stopped) if not."""
    project = plan.project
    tasks = _wait_running(stack)
    containers = swarm_engine.stack_containers(project)
    if settle(containers.values()):  # a task whose command fails at once has ended
        tasks = swarm_engine.stack_tasks(project)
        containers = swarm_engine.stack_containers(project)
    problems = [
        *waiting_on(stack, tasks)[0],
        *state_problems(plan, containers.values()),
        *verify_tasks(stack, tasks, containers),
    ]
    if problems:
        raise DockerError(
            f"the deployed stack does not match the plan: {'; '.join(problems)}",
            hint="\n  ".join(
                [
                    *stopped_logs(plan, containers.values()),
                    "the stack was removed; `drgpu swarm-setup` checks a node's GPU resources",
                ]
            ),
        )
    return [task for task in tasks if task.state == "running"]


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
            raise DockerError(
                f"the stack cannot start: {'; '.join(sorted(set(stuck)))}",
                hint=stuck_hint(stuck),
            )
        if now >= deadline:
            raise DockerError(f"the stack did not start in {START_TIMEOUT_S:.0f}s: {waiting[0]}")
        time.sleep(POLL_S)
