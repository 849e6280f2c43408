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
from drgpu.targets.swarm_stack import SwarmStack

if TYPE_CHECKING:
    from drgpu.commands.up_down import Prepared
    from drgpu.core.facts import TaskFacts

START_TIMEOUT_S = 180.0
STUCK_GRACE_S = 5.0
REMOVE_TIMEOUT_S = 90.0
POLL_S = 0.5


def render(prepared: Prepared) -> SwarmStack:
    """The stack file of a prepared plan (reads the stack through `compose config`)."""
    from drgpu.core.planning import refuse_service_gpus_on_swarm
    from drgpu.host.compose import resolve_stack
    from drgpu.targets.swarm_stack import render_stack, swarm_services

    refuse_service_gpus_on_swarm(prepared.plan)
    model = resolve_stack(prepared.config, prepared.stack.files)
    services = swarm_services(prepared.plan, model["services"], prepared.config.workers)
    return render_stack(prepared.plan, model, services)


def stack_file(prepared: Prepared) -> Path:
    """drgpu's stack file, beside its compose override in the `.drgpu` folder."""
    return prepared.override_path.with_name(f"{prepared.plan.project}.swarm.yml")


def up(prepared: Prepared) -> tuple[SwarmStack, list[TaskFacts]]:
    """Render, deploy, wait for every task and verify them; on failure the stack is removed."""
    from drgpu.commands.up_down import write_owned_file
    from drgpu.host import compose, process
    from drgpu.ui.talk import spinner

    stack = render(prepared)
    path = stack_file(prepared)
    write_owned_file(path, stack.text)
    environment = compose.compose_environment(prepared.config.values)
    project = prepared.plan.project
    command = [docker_cli(), "stack", "deploy", "-c", str(path), "--prune"]
    with spinner(f"deploying {project} to the swarm"):
        deployed = process.run([*command, "--resolve-image", "never", project], env=environment)
        if not deployed.ok:
            _remove(project, environment)
            raise DockerError(
                f"docker stack deploy failed: {deployed.last_error_line()}",
                hint=_deploy_hint(deployed.stderr),
            )
        try:
            tasks = _wait_running(stack)
        except DockerError:
            _remove(project, environment)
            raise
    from drgpu.targets.swarm_stack import verify_tasks

    problems = verify_tasks(stack, tasks)
    if problems:
        _remove(project, environment)
        raise DockerError(
            f"the deployed stack does not match the plan: {'; '.join(problems)}",
            hint="the stack was removed; `drgpu swarm-setup` checks a node's GPU resources",
        )
    return stack, [task for task in tasks if task.state == "running"]


def down(config: Config) -> None:
    """Remove the stack and wait until its services, containers and networks are gone."""
    from drgpu.host import compose
    from drgpu.ui.talk import spinner

    with spinner(f"removing {config.project} from the swarm"):
        _remove(config.project, compose.compose_environment(config.values))


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
    if not removed.ok and "nothing found" not in removed.stderr.lower():
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
