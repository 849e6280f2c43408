"""`drgpu up`: check, render, start the stack and prove it, by the way its settings ask
for: DRfC's own start script in an activated DRfC shell (`drfc_stack`: Compose or, in
swarm style, `docker stack deploy`), drgpu's own Swarm stack file (`swarm_deploy`), or
Compose (`compose_run`)."""

from __future__ import annotations

from dataclasses import dataclass

from drgpu.commands import compose_run, drfc_stack, run_lock, swarm_deploy
from drgpu.commands.options import InputOptions, resolved, settings
from drgpu.commands.preparation import prepare_locked, prepare_with
from drgpu.core.facts import ContainerFacts, TaskFacts
from drgpu.core.inputs import Inputs
from drgpu.core.model import Plan
from drgpu.core.service_gpus import SwarmStack
from drgpu.core.settings import Config
from drgpu.errors import ConfigError
from drgpu.host.state_files import new_state_dir, removed_on_failure
from drgpu.ui.progress import UpProgress
from drgpu.ui.talk import warn


@dataclass(frozen=True)
class UpOptions:
    """`drgpu up`'s options: `script_args` for DRfC's start script (after `--`), `quiet`:
    no progress lines."""

    inputs: InputOptions
    swarm: bool = False
    script_args: tuple[str, ...] = ()
    quiet: bool = False


@dataclass(frozen=True)
class Started:
    """A stack started by Compose (or DRfC's start script): its plan and its containers,
    each proven."""

    plan: Plan
    containers: list[ContainerFacts]


@dataclass(frozen=True)
class Deployed:
    """A stack deployed to Docker Swarm: its stack file and its running tasks, verified."""

    stack: SwarmStack
    tasks: list[TaskFacts]


def up(options: UpOptions) -> Started | Deployed:
    """Start the stack the options name, and prove it (any failure raises its DrgpuError,
    the stack brought back down)."""
    target = resolved(options.inputs)
    config = settings(target)
    config.refuse_key_mistakes()
    explicit_files = options.inputs.compose_files is not None
    scripts = drfc_stack.runs_scripts(target, explicit_files=explicit_files)
    if scripts and drfc_stack.swarm_style(config):
        script_target = drfc_stack.script_target(target, config)
        return _drfc_swarm_up(config, script_target, options.script_args)
    own_swarm = config.deploys_to_swarm(options.swarm)  # `--swarm` outside DRfC's swarm style
    scripts = scripts and not own_swarm
    if scripts:
        target = drfc_stack.script_target(target, config)
    elif options.script_args:
        raise ConfigError(
            f"unexpected argument {options.script_args[0]!r}",
            hint="arguments after `--` are for DRfC's start script, in an activated DRfC shell",
        )
    if own_swarm:
        return _swarm_up(config, target)
    with prepare_locked(config, target) as prepared:
        for message in prepared.plan.warnings:
            warn(message)
        with UpProgress(quiet=options.quiet) as progress:
            if scripts:
                plan, containers = drfc_stack.up(prepared, options.script_args, progress)
            else:
                plan, containers = prepared.plan, compose_run.up(prepared, progress)
    return Started(plan, containers)


def _drfc_swarm_up(config: Config, target: Inputs, script_args: tuple[str, ...]) -> Deployed:
    """`up` in a swarm-style DRfC shell: DRfC's start script deploys, with drgpu's override
    appended to its `-c` list (under the engine-wide lock, as every `up` and `down`)."""
    with prepare_locked(config, target) as prepared:
        for message in prepared.plan.warnings:
            warn(message)
        stack, tasks = drfc_stack.swarm_up(prepared, script_args)
    return Deployed(stack, tasks)


def _swarm_up(config: Config, target: Inputs) -> Deployed:
    """`up` on Docker Swarm: deploy the stack, wait for its tasks, verify them (under the
    engine-wide lock, as every `up` and `down`)."""
    made = new_state_dir(target.env_file)
    with removed_on_failure(made=made), run_lock.locked("up", config.project, config.values):
        prepared = prepare_with(config, target, None)
        for message in prepared.plan.warnings:
            warn(message)
        with removed_on_failure(swarm_deploy.stack_file(prepared)):  # a failed deploy's file
            stack, tasks = swarm_deploy.up(prepared)
    return Deployed(stack, tasks)
