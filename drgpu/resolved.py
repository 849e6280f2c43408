"""The user's stack as Compose resolves it: files merged, variables interpolated.

Swarm stack files and Kubernetes manifests are written from this model, so that
`!reset`, `!override`, `extends` and `${VAR:-default}` mean exactly what they mean
to Compose (`docker stack deploy` knows none of the first three, nor nested defaults).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from drgpu.config import Config
from drgpu.errors import ConfigError, DockerError


def resolve_stack(config: Config, files: tuple[Path, ...]) -> dict[str, Any]:
    """`compose config --format json` of the stack's files, with system.env's values."""
    from drgpu import compose, process

    binary = compose.find_compose(config.values)
    command = compose.compose_command(binary, config.project, files, "config", "--format", "json")
    done = process.run(command, env=compose.compose_environment(config.values), timeout=60)
    if not done.ok:
        raise ConfigError(f"compose cannot read the stack: {done.last_error_line()}")
    try:
        model = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise DockerError("compose config printed no JSON (is it Compose v2?)") from None
    if not isinstance(model, dict) or not isinstance(model.get("services"), dict):
        raise DockerError("compose config printed no services")
    return model
