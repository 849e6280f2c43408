"""`drgpu swarm-setup`: read this node's daemon.json, the NVIDIA runtime's config.toml and
`docker info`; core.swarm_node reports what differs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from drgpu.core.model import Inventory, Role
from drgpu.core.settings import Config
from drgpu.core.swarm_node import NodeState, read_swarm_resource


def trainer_gpus(config: Config | None, inventory: Inventory) -> tuple[str, ...]:
    """The GPUs (UUIDs) the settings give the trainer on this node, planned as `drgpu
    plan` would; none without settings (a simulator-only node)."""
    if config is None:
        return ()
    from drgpu.core.compose_stack import base_stack_file, load_stack
    from drgpu.core.planning import make_plan

    plan = make_plan(config, load_stack([base_stack_file()]), inventory)
    return tuple(
        device.uuid
        for service in plan.services
        if service.role in (Role.TRAINER, Role.TRAINER_LAUNCHER)
        for device in service.devices
    )


def read_node(daemon_json_path: Path, toolkit_path: Path) -> NodeState:
    """Read daemon.json, the NVIDIA runtime's config.toml and `docker info` (the shell)."""
    from drgpu.errors import DockerError
    from drgpu.host.swarm_engine import engine_facts

    daemon_json: Mapping[str, Any] | None = None
    daemon_json_problem = None
    try:
        loaded = json.loads(daemon_json_path.read_text(encoding="utf-8"))
        if isinstance(loaded, dict):
            daemon_json = loaded
        else:
            daemon_json_problem = "not a JSON object"
    except FileNotFoundError:
        daemon_json, daemon_json_problem = None, "absent: create it as printed above"
    except (OSError, UnicodeDecodeError) as exc:
        daemon_json_problem = f"cannot be read: {exc}"
    except json.JSONDecodeError as exc:
        daemon_json_problem = f"not JSON (line {exc.lineno}): dockerd will not start with it"
    swarm_resource = toolkit_problem = None
    try:
        swarm_resource = read_swarm_resource(toolkit_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        toolkit_problem = "absent: is the NVIDIA container toolkit installed?"
    except (OSError, UnicodeDecodeError) as exc:
        toolkit_problem = f"cannot be read: {exc}"
    engine = engine_problem = None
    try:
        engine = engine_facts()
    except DockerError as exc:
        engine_problem = exc.message
    return NodeState(
        daemon_json=daemon_json,
        daemon_json_problem=daemon_json_problem,
        swarm_resource=swarm_resource,
        toolkit_problem=toolkit_problem,
        engine=engine,
        engine_problem=engine_problem,
    )
