"""`drgpu swarm-setup`: read this node's daemon.json, the NVIDIA runtime's config.toml and
`docker info`; core.swarm_node reports what differs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from drgpu.commands.options import resolved, settings
from drgpu.core.inputs import InputOptions
from drgpu.core.model import Role
from drgpu.core.planning import make_plan
from drgpu.core.swarm_node import NodeState, SetupReport, report, runs_trainer, wanted_resources
from drgpu.errors import ConfigError, DockerError
from drgpu.host import container_toolkit, files, nvml, swarm_engine


def swarm_setup(
    inventory: Path | None, daemon_json: Path, toolkit_config: Path, env_file: Path | None
) -> SetupReport:
    """Read the GPUs of `inventory` (None: this host's), the settings (when there are any:
    their trainer's GPUs are kept from the swarm) and this node's state, and report."""
    gpus = files.load_inventory(inventory) if inventory is not None else nvml.read_inventory()
    target = resolved(InputOptions(env_file=env_file, needs_files=False))
    config = settings(target) if files.exists(target.env_file, file=True) else None
    state = read_node(daemon_json, toolkit_config)
    here = config is None or runs_trainer(state.engine, config.trainer_devices, gpus)
    kept: tuple[str, ...] = ()
    if config is not None and here:  # the trainer's GPUs, planned as `drgpu plan` would
        plan = make_plan(config, files.load_stack([files.base_stack_file()]), gpus)
        trainers = [s for s in plan.services if s.role in (Role.TRAINER, Role.TRAINER_LAUNCHER)]
        kept = tuple(device.uuid for service in trainers for device in service.devices)
    wanted = wanted_resources(gpus, kept)
    return report(wanted, state, daemon_json, toolkit_config, kept=kept, trainer_here=here)


def read_node(daemon_json_path: Path, toolkit_path: Path) -> NodeState:
    """Read daemon.json, the NVIDIA runtime's config.toml and version, and `docker info`."""
    daemon_json, toolkit = _read_daemon_json(daemon_json_path), container_toolkit.read(toolkit_path)
    facts = engine_problem = None
    try:
        facts = swarm_engine.engine_facts()
    except DockerError as exc:
        engine_problem = exc.message
    return NodeState(*daemon_json, *toolkit, facts, engine_problem)


def _read_daemon_json(path: Path) -> tuple[Mapping[str, Any] | None, str | None]:
    """daemon.json's object, or why there is none."""
    try:
        text = files.optional_text(path)
        if text is None:
            return None, "absent: create it with the daemon.json swarm-setup prints"
        loaded = json.loads(text)
    except ConfigError as exc:
        return None, exc.message
    except json.JSONDecodeError as exc:
        return None, f"not JSON (line {exc.lineno}): dockerd will not start with it"
    return (loaded, None) if isinstance(loaded, dict) else (None, "not a JSON object")
