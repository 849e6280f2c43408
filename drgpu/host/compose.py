"""How drgpu drives Docker Compose: finding it, the command lines it runs, and the stack as
Compose resolves it, from which Swarm stack files and Kubernetes manifests are written (so
`!reset`, `!override`, `extends` and nested `${VAR:-default}` mean what they mean to Compose,
unlike to `docker stack deploy`)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drgpu.errors import ConfigError, DockerError
from drgpu.host import docker_api, process

if TYPE_CHECKING:
    from drgpu.core.settings import Config

_PLUGIN_DIRS = (
    "~/.docker/cli-plugins",
    "/usr/local/lib/docker/cli-plugins",
    "/usr/local/libexec/docker/cli-plugins",
    "/usr/lib/docker/cli-plugins",
    "/usr/libexec/docker/cli-plugins",
)


def find_compose(settings: Mapping[str, str]) -> tuple[str, ...]:
    """The Compose command: DRGPU_COMPOSE, else the docker plugin, else a docker-compose v2."""
    chosen = settings.get("DRGPU_COMPOSE") or os.environ.get("DRGPU_COMPOSE")
    if chosen:
        return _chosen_compose(chosen)
    docker = shutil.which("docker")
    if docker and any(
        (Path(directory).expanduser() / "docker-compose").is_file() for directory in _PLUGIN_DIRS
    ):
        return (docker, "compose")
    if standalone := shutil.which("docker-compose"):
        return (standalone,)
    if (beside_python := Path(sys.executable).parent / "docker-compose").is_file():
        return (str(beside_python),)
    raise DockerError(
        "no Docker Compose found",
        hint="install the docker compose plugin (>= 2.24.4), or set DRGPU_COMPOSE",
    )


def _chosen_compose(chosen: str) -> tuple[str, ...]:
    """DRGPU_COMPOSE split as a shell would, its program checked before it is run."""
    try:
        words = tuple(shlex.split(chosen))
    except ValueError as exc:
        raise ConfigError(f"DRGPU_COMPOSE: {exc}: {chosen[:60]!r}") from None
    hint = "set DRGPU_COMPOSE to the Compose command, e.g. 'docker compose'"
    if not words:
        raise ConfigError("DRGPU_COMPOSE is blank", hint=hint)
    program = words[0]
    found = program if "/" in program else shutil.which(program)
    if found is None or not Path(found).is_file():
        raise ConfigError(f"DRGPU_COMPOSE: {program[:80]!r} is not a program", hint=hint)
    if not os.access(found, os.X_OK):
        raise ConfigError(f"DRGPU_COMPOSE: {program[:80]!r} is not executable", hint=hint)
    return words


def compose_command(
    compose: tuple[str, ...], project: str, files: tuple[Path, ...], *args: str
) -> list[str]:
    """`<compose> -p PROJECT -f FILE ... ARGS`."""
    return [*compose, "-p", project, *(word for path in files for word in ("-f", str(path))), *args]


def compose_down(
    binary: tuple[str, ...], project: str, files: tuple[Path, ...], environment: dict[str, str]
) -> process.Completed:
    """`compose down --remove-orphans` of the project's files."""
    command = compose_command(binary, project, files, "down", "--remove-orphans")
    return process.run(command, env=environment)


def compose_environment(settings: Mapping[str, str]) -> dict[str, str]:
    """The environment of Compose, `docker stack` and DRfC's scripts: the process's with
    `settings` on top, pointed at drgpu's engine (`docker_api.program_environment`)."""
    return docker_api.program_environment({**os.environ, **settings})


def resolve_stack(config: Config, files: tuple[Path, ...]) -> dict[str, Any]:
    """`compose config --format json` of the stack's files, with system.env's values."""
    binary = find_compose(config.values)
    command = compose_command(binary, config.project, files, "config", "--format", "json")
    done = process.run(command, env=compose_environment(config.values), timeout=60)
    if not done.ok:
        raise ConfigError(f"compose cannot read the stack: {done.last_error_line()}")
    try:
        model = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise DockerError("compose config printed no JSON (is it Compose v2?)") from None
    if not isinstance(model, dict) or not isinstance(model.get("services"), dict):
        raise DockerError("compose config printed no services")
    return model
