"""`drgpu up` and `down` on Swarm, around `targets.swarm_stack`: render, `docker stack deploy`,
wait, verify, `stack rm`."""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from drgpu.core.settings import Config
from drgpu.errors import DockerError
from drgpu.targets.swarm_stack import SwarmStack, SwarmView

if TYPE_CHECKING:
    from drgpu.commands.up_down import Prepared
    from drgpu.core.facts import EngineFacts, TaskFacts

START_TIMEOUT_S = 180.0
STUCK_GRACE_S = 5.0
REMOVE_TIMEOUT_S = 90.0
POLL_S = 0.5


def render(prepared: Prepared, engine: EngineFacts | None) -> SwarmStack:
    """The stack file of a prepared plan (reads the stack through `compose config`), laid
    out for the swarm `engine` describes (None: a one-node swarm, node unknown)."""
    from drgpu.core.swarm_node import swarm_gpu_mode, swarm_layout
    from drgpu.host.compose import resolve_stack
    from drgpu.targets.swarm_stack import render_stack, swarm_services

    layout = swarm_layout(swarm_gpu_mode(prepared.config.values), engine)
    model = resolve_stack(prepared.config, prepared.stack.files)
    services = swarm_services(prepared.plan, model["services"], prepared.config.workers, layout)
    return render_stack(prepared.plan, model, services, layout)


def plan_view(prepared: Prepared, *, this_host: bool) -> SwarmView:
    """How the plan's services would get their GPUs on the swarm (this engine's, when
    planned on this host; else a one-node swarm)."""
    from drgpu.core.swarm_node import swarm_gpu_mode, swarm_layout
    from drgpu.targets.swarm_stack import swarm_services

    engine, blind = this_swarm() if this_host else (None, None)
    layout = swarm_layout(swarm_gpu_mode(prepared.config.values), engine)
    names = [service.name for service in prepared.stack.services]
    services = swarm_services(prepared.plan, names, prepared.config.workers, layout)
    return SwarmView(services=services, layout=layout, warnings=(blind,) if blind else ())


def this_swarm() -> tuple[EngineFacts | None, str | None]:
    """This engine's swarm facts; when it cannot be asked, None and why."""
    from drgpu.host.engine import engine_facts

    try:
        return engine_facts(), None
    except DockerError as exc:
        return None, f"cannot ask the swarm ({exc.message}): laid out for a one-node swarm"


def check_node(stack: SwarmStack, engine: EngineFacts) -> None:
    """Refuse a stack this node would not isolate: pinned GPUs need the nvidia default
    runtime, and no GPU pinned for one service may be advertised while simulators
    reserve generic resources (the engine could give it to one of them)."""
    from drgpu.core.swarm_node import RUNTIME, SWARM_GPUS_KEY
    from drgpu.errors import GpuValidationError
    from drgpu.targets.swarm_stack import exposed_gpus

    exposed = exposed_gpus(stack.services, stack.layout)
    if exposed:
        raise GpuValidationError(
            exposed,
            hint="`drgpu swarm-setup` prints node-generic-resources without the trainer's GPU"
            f" (then restart dockerd), or {SWARM_GPUS_KEY}=pin runs the simulators on this node",
        )
    pinned = [s.name for s in stack.services if s.pinned]
    # On a node in no swarm, `docker stack deploy` itself says so: that is the error to give.
    if pinned and engine.swarm_state == "active" and engine.default_runtime != RUNTIME:
        raise DockerError(
            f"this node's default runtime is {engine.default_runtime or 'unknown'}, not"
            f" {RUNTIME}: Swarm tasks would get no GPU ({', '.join(pinned)})",
            hint="`drgpu swarm-setup` prints the daemon.json this node needs",
        )


def stack_file(prepared: Prepared) -> Path:
    """drgpu's stack file, beside its compose override in the `.drgpu` folder."""
    return stack_path(prepared.override_path, prepared.plan.project)


def stack_path(override: Path, project: str) -> Path:
    """The stack file of `project`, beside its compose override `override`."""
    return override.with_name(f"{project}.swarm.yml")


def up(prepared: Prepared) -> tuple[SwarmStack, list[TaskFacts]]:
    """Render, deploy, wait for every task, let each run as long as a Compose stack's
    containers must (`up_down.settle`) and verify what each really got; on any failure
    or caught signal the stack is removed (`guard.rolled_back`: `docker stack rm`, waited
    for, then the run's containers and networks)."""
    from drgpu.commands import guard
    from drgpu.commands.state_files import write_owned_file
    from drgpu.commands.up_down import settle, stopped_logs
    from drgpu.core.verification import state_problems
    from drgpu.host import compose, engine, process
    from drgpu.targets.swarm_stack import verify_tasks, waiting_on
    from drgpu.ui.talk import spinner

    facts = engine.engine_facts()
    stack = render(prepared, facts)
    check_node(stack, facts)
    path = stack_file(prepared)
    write_owned_file(path, stack.text)  # mode 600: secrets stay
    environment = compose.compose_environment(prepared.config.values)
    project = prepared.plan.project
    command = [docker_cli(), "stack", "deploy", "-c", str(path), "--prune"]
    with (
        guard.rolled_back(project, lambda: _remove_after_failure(project, environment)),
        spinner(f"deploying {project} to the swarm"),
    ):
        deployed = process.run([*command, "--resolve-image", "never", project], env=environment)
        if not deployed.ok:
            raise DockerError(
                f"docker stack deploy failed: {deployed.last_error_line()}",
                hint=_deploy_hint(deployed.stderr),
            )
        tasks = _wait_running(stack)
        containers = engine.stack_containers(project)
        if settle(containers.values()):  # a task whose command fails at once has ended
            tasks = engine.stack_tasks(project)
            containers = engine.stack_containers(project)
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
    return stack, [task for task in tasks if task.state == "running"]


def remove_stale(project: str) -> int:
    """Remove the Swarm stack a killed `drgpu up` left of `project` (waited for); how many
    services it had (0: none, or an engine that is no swarm manager)."""
    from drgpu.host import compose, engine

    services = engine.stack_service_count(project)
    if services:
        _remove(project, compose.compose_environment({}))
    return services


def _remove_after_failure(project: str, environment: Mapping[str, str]) -> None:
    """Remove what a failed deploy left; the failure itself is the error to report (a
    node that is no manager cannot deploy, nor remove)."""
    from drgpu.ui.talk import warn

    try:
        _remove(project, environment)
    except DockerError as exc:
        warn(f"after the failure, {exc.message}")


def down(config: Config, stack: Path) -> None:
    """Remove the stack and wait until its services, containers and networks are gone;
    then its stack file `stack` (it holds the settings' secrets) when drgpu wrote it."""
    from drgpu.commands.state_files import written_by_drgpu
    from drgpu.host import compose
    from drgpu.ui.talk import spinner

    with spinner(f"removing {config.project} from the swarm"):
        _remove(config.project, compose.compose_environment(config.values))
    if stack.is_file() and written_by_drgpu(stack):
        stack.unlink()


def docker_cli() -> str:
    """The docker command line client (it speaks Compose files to Swarm)."""
    found = shutil.which("docker")
    if found is None:
        raise DockerError("docker: command not found", hint="install the docker CLI (>= 23)")
    return found


def _wait_running(stack: SwarmStack) -> list[TaskFacts]:
    from drgpu.host.engine import stack_tasks
    from drgpu.targets.swarm_stack import waiting_on

    deadline = time.monotonic() + START_TIMEOUT_S
    stuck_since: float | None = None
    while True:
        tasks = stack_tasks(stack.project)
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


def _remove(project: str, environment: Mapping[str, str]) -> None:
    """`docker stack rm`, repeated until nothing of the stack is left (networks go last)."""
    from drgpu.host import process
    from drgpu.host.engine import stack_leftovers

    deadline = time.monotonic() + REMOVE_TIMEOUT_S
    command = [docker_cli(), "stack", "rm", project]
    removed = process.run(command, env=environment)
    error = removed.stderr.lower()
    # A network still used by a stopping task goes on a later try (below).
    if not removed.ok and "nothing found" not in error and "in use by task" not in error:
        raise DockerError(f"docker stack rm failed: {removed.last_error_line()}")
    while True:
        left = stack_leftovers(project)
        if not any(left.values()):
            return
        if time.monotonic() >= deadline:
            what = ", ".join(f"{count} {kind}" for kind, count in left.items() if count)
            raise DockerError(f"{project} is not gone after {REMOVE_TIMEOUT_S:.0f}s: {what} left")
        if not left["services"] and not left["containers"]:
            process.run(command, env=environment)  # networks still in use a moment ago
        time.sleep(POLL_S)


def _deploy_hint(stderr: str) -> str | None:
    if "not a swarm manager" in stderr or "docker swarm init" in stderr:
        return "run it on a swarm manager (`docker swarm init`, or join this node to the swarm)"
    if "Additional property" in stderr:
        return "the docker CLI is too old for this stack file: drgpu needs docker CLI >= 23"
    return None
