"""`drgpu down`: stop and remove the stack the way `up` started it: DRfC's own stop script
in an activated DRfC shell (Compose or swarm style), drgpu's Swarm stack, or Compose."""

from __future__ import annotations

from dataclasses import dataclass

from drgpu.commands import compose_run, drfc_stack, swarm_deploy
from drgpu.commands.options import InputOptions, resolved, settings
from drgpu.commands.run_lock import down_locked
from drgpu.host.state_files import override_path


@dataclass(frozen=True)
class DownOptions:
    """`drgpu down`'s options."""

    inputs: InputOptions
    swarm: bool = False


def down(options: DownOptions) -> None:
    """Stop and remove the stack's containers (with --remove-orphans), or its Swarm stack
    (under the engine-wide lock: see `run_lock`)."""
    target = resolved(options.inputs)
    config = settings(target)
    scripts = drfc_stack.runs_scripts(
        target, explicit_files=options.inputs.compose_files is not None
    )
    if scripts and drfc_stack.swarm_style(config):
        drfc_stack.swarm_down(config, target)
        return
    if config.deploys_to_swarm(options.swarm):
        stack = swarm_deploy.stack_path(
            override_path(target.env_file, config.project), config.project
        )
        with down_locked(config, target):
            swarm_deploy.down(config, stack)
        return
    if scripts:
        drfc_stack.down(config, drfc_stack.script_target(target, config))
        return
    compose_run.down(config, target)
