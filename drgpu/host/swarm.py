"""The docker CLI's Swarm stack commands (`docker stack deploy`, `docker stack rm`) and what
their stderr means."""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from pathlib import Path

from drgpu.errors import DockerError
from drgpu.host import process, swarm_engine

REMOVE_TIMEOUT_S = 90.0
POLL_S = 0.2


def docker_cli() -> str:
    """The docker command line client (it speaks Compose files to Swarm)."""
    found = shutil.which("docker")
    if found is None:
        raise DockerError("docker: command not found", hint="install the docker CLI (>= 23)")
    return found


def deploy(project: str, stack_file: Path, environment: Mapping[str, str]) -> None:
    """`docker stack deploy` of `stack_file` as `project`; its failure as a DockerError."""
    command = [docker_cli(), "stack", "deploy", "-c", str(stack_file), "--prune"]
    deployed = process.run([*command, "--resolve-image", "never", project], env=environment)
    if not deployed.ok:
        raise DockerError(
            f"docker stack deploy failed: {deployed.last_error_line()}",
            hint=_deploy_hint(deployed.stderr),
        )


def remove_stack(project: str, environment: Mapping[str, str]) -> None:
    """`docker stack rm`, repeated until no node holds anything of the stack (networks last)."""
    deadline = time.monotonic() + REMOVE_TIMEOUT_S
    command = [docker_cli(), "stack", "rm", project]
    removed = process.run(command, env=environment)
    error = removed.stderr.lower()
    # A network still used by a stopping task goes on a later try (below).
    if not removed.ok and "nothing found" not in error and "in use by task" not in error:
        raise DockerError(f"docker stack rm failed: {removed.last_error_line()}")
    while True:
        left = swarm_engine.stack_leftovers(project)
        if not any(left.values()):
            return
        if time.monotonic() >= deadline:
            what = ", ".join(f"{count} {kind}" for kind, count in left.items() if count)
            raise DockerError(f"{project} is not gone after {REMOVE_TIMEOUT_S:.0f}s: {what} left")
        if not left["services"] and not left["tasks"] and not left["containers"]:
            process.run(command, env=environment)  # networks still in use a moment ago
        time.sleep(POLL_S)


def _deploy_hint(stderr: str) -> str | None:
    if "not a swarm manager" in stderr or "docker swarm init" in stderr:
        return "run it on a swarm manager (`docker swarm init`, or join this node to the swarm)"
    if "Additional property" in stderr:
        return "the docker CLI is too old for this stack file: drgpu needs docker CLI >= 23"
    return None
