"""`drgpu up` and `down` on Swarm, around `targets.swarm_stack`: render, `docker stack deploy`,
wait, verify, `stack rm`."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from drgpu.core.redaction import secret_values
from drgpu.core.service_gpus import SwarmStack
from drgpu.core.settings import Config
from drgpu.core.swarm_node import RUNTIME, SWARM_GPUS_KEY, swarm_gpu_mode, swarm_layout
from drgpu.core.verification import verify_tasks, waiting_on
from drgpu.errors import DockerError, GpuValidationError
from drgpu.host import compose, swarm, swarm_engine
from drgpu.host.state_files import write_owned_file, written_by_drgpu
from drgpu.targets.swarm_stack import SwarmView, exposed_gpus, render_stack, swarm_services
from drgpu.ui.talk import spinner, warn

if TYPE_CHECKING:
    from drgpu.commands.preparation import Prepared
    from drgpu.core.facts import EngineFacts, TaskFacts

START_TIMEOUT_S = 180.0
STUCK_GRACE_S = 5.0
POLL_S = 0.1  # a few cheap API calls; every 0.1 s of waiting counts in `up`


def render(prepared: Prepared, facts: EngineFacts | None) -> SwarmStack:
    """The stack file of a prepared plan (reads the stack through `compose config`), laid
    out for the swarm the engine's `facts` describe (None: a one-node swarm, node unknown)."""
    layout = swarm_layout(swarm_gpu_mode(prepared.config.values), facts)
    model = compose.resolve_stack(prepared.config, prepared.stack.files)
    services = swarm_services(prepared.plan, model["services"], prepared.config.workers, layout)
    secrets = secret_values(prepared.config.values)
    return render_stack(prepared.plan, model, services, layout, secrets)


def plan_view(prepared: Prepared, *, this_host: bool) -> SwarmView:
    """How the plan's services would get their GPUs on the swarm (this engine's, when
    planned on this host; else a one-node swarm)."""
    facts, blind = this_swarm() if this_host else (None, None)
    layout = swarm_layout(swarm_gpu_mode(prepared.config.values), facts)
    names = [service.name for service in prepared.stack.services]
    services = swarm_services(prepared.plan, names, prepared.config.workers, layout)
    return SwarmView(services=services, layout=layout, warnings=(blind,) if blind else ())


def this_swarm() -> tuple[EngineFacts | None, str | None]:
    """This engine's swarm facts; when it cannot be asked, None and why."""
    try:
        return swarm_engine.engine_facts(), None
    except DockerError as exc:
        return None, f"cannot ask the swarm ({exc.message}): laid out for a one-node swarm"


def check_node(stack: SwarmStack, facts: EngineFacts) -> None:
    """Refuse a stack this node would not isolate: pinned GPUs need the nvidia default
    runtime, and no GPU pinned for one service may be advertised while simulators
    reserve generic resources (the engine could give it to one of them)."""
    exposed = exposed_gpus(stack.services, stack.layout)
    if exposed:
        raise GpuValidationError(
            exposed,
            hint="`drgpu swarm-setup` prints node-generic-resources without the trainer's GPU"
            f" (then restart dockerd), or {SWARM_GPUS_KEY}=pin runs the simulators on this node",
        )
    pinned = [s.name for s in stack.services if s.pinned]
    # On a node in no swarm, `docker stack deploy` itself says so: that is the error to give.
    if pinned and facts.swarm_state == "active" and facts.default_runtime != RUNTIME:
        raise DockerError(
            f"this node's default runtime is {facts.default_runtime or 'unknown'}, not"
            f" {RUNTIME}: Swarm tasks would get no GPU ({', '.join(pinned)})",
            hint="`drgpu swarm-setup` prints the daemon.json this node needs",
        )


def stack_file(prepared: Prepared) -> Path:
    """drgpu's stack file, beside its compose override in the `.drgpu` folder."""
    return stack_path(prepared.override_path, prepared.plan.project)


def stack_path(override: Path, project: str) -> Path:
    """The stack file of `project`, beside its compose override `override`."""
    return override.with_name(f"{project}.swarm.yml")


def swarm_override_path(override: Path, project: str) -> Path:
    """drgpu's override of DRfC's swarm files for `project`, beside its compose override."""
    return override.with_name(f"{project}.swarm-override.yml")


def up(prepared: Prepared) -> tuple[SwarmStack, list[TaskFacts]]:
    """Render, deploy, wait for every task, let each run as long as a Compose stack's
    containers must (`proving.settle`) and verify what each really got; on any failure
    or caught signal the stack is removed (`rollback.rolled_back`: `docker stack rm`, waited
    for, then the run's containers and networks)."""
    # lazy: start-up time of plan and render, which never deploy
    from drgpu.commands.rollback import rolled_back

    facts = swarm_engine.engine_facts()
    stack = render(prepared, facts)
    check_node(stack, facts)
    path = stack_file(prepared)
    write_owned_file(path, stack.text)  # mode 600: secrets stay
    environment = compose.compose_environment(prepared.config.values)
    project = prepared.plan.project
    with (
        rolled_back(project, lambda: _remove_after_failure(project, environment)),
        spinner(f"deploying {project} to the swarm"),
    ):
        swarm.deploy(project, path, environment)
        tasks = proven(prepared, stack)
    return stack, tasks


def proven(prepared: Prepared, stack: SwarmStack) -> list[TaskFacts]:
    """The running tasks of the deployed `stack`, once every one runs and has run as long
    as a Compose stack's containers must (`proving.settle`), each verified against the
    plan; a DockerError naming every difference (with the last log lines of each task
    that stopped) if not."""
    # lazy: start-up time of plan and render, which never deploy
    from drgpu.commands.proving import settle, stopped_logs
    from drgpu.core.verification import state_problems  # lazy: start-up time of plan --swarm

    project = prepared.plan.project
    tasks = _wait_running(stack)
    containers = swarm_engine.stack_containers(project)
    if settle(containers.values()):  # a task whose command fails at once has ended
        tasks = swarm_engine.stack_tasks(project)
        containers = swarm_engine.stack_containers(project)
    problems = [
        *waiting_on(stack, tasks)[0],
        *state_problems(prepared.plan, containers.values()),
        *verify_tasks(stack, tasks, containers),
    ]
    if problems:
        raise DockerError(
            f"the deployed stack does not match the plan: {'; '.join(problems)}",
            hint="\n  ".join(
                [
                    *stopped_logs(prepared.plan, containers.values()),
                    "the stack was removed; `drgpu swarm-setup` checks a node's GPU resources",
                ]
            ),
        )
    return [task for task in tasks if task.state == "running"]


def _remove_after_failure(project: str, environment: Mapping[str, str]) -> None:
    """Remove what a failed deploy left; the failure itself is the error to report (a
    node that is no manager cannot deploy, nor remove)."""
    try:
        swarm.remove_stack(project, environment)
    except DockerError as exc:
        warn(f"after the failure, {exc.message}")


def down(config: Config, stack: Path) -> None:
    """Remove the stack and wait until its services, containers and networks are gone;
    then its stack file `stack` (it holds the settings' secrets) when drgpu wrote it."""
    with spinner(f"removing {config.project} from the swarm"):
        swarm.remove_stack(config.project, compose.compose_environment(config.values))
    if stack.is_file() and written_by_drgpu(stack):
        stack.unlink()


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
                hint="each GPU task needs a node with the label and free NVIDIA-GPU resources:"
                " `drgpu swarm-setup` on each node, `docker node update --label-add`",
            )
        if now >= deadline:
            raise DockerError(f"the stack did not start in {START_TIMEOUT_S:.0f}s: {waiting[0]}")
        time.sleep(POLL_S)
