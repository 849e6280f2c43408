"""`drgpu up`: check, render, start and prove the stack, the way its settings ask: DRfC's start
script in an activated DRfC shell (`drfc_stack`, Compose or swarm style), drgpu's own Swarm
stack file (`swarm_deploy`), or Compose (`compose_run`)."""

from __future__ import annotations

from dataclasses import dataclass

from drgpu.commands import compose_run, drfc_stack, swarm_deploy
from drgpu.commands.options import resolved, settings
from drgpu.commands.preparation import prepare_locked
from drgpu.core.facts import ContainerFacts, TaskFacts
from drgpu.core.faults import preflight
from drgpu.core.findings import Finding
from drgpu.core.inputs import InputOptions
from drgpu.core.model import Plan
from drgpu.core.service_gpus import SwarmStack
from drgpu.errors import ConfigError, GpuValidationError
from drgpu.ui.progress import UpProgress
from drgpu.ui.talk import warn


@dataclass(frozen=True)
class Started:
    """A stack Compose (or DRfC's start script) started: its plan and proven containers."""

    plan: Plan
    containers: list[ContainerFacts]
    unproven: list[Finding]  # not provable from inside: a warning each


@dataclass(frozen=True)
class Deployed:
    """A stack deployed to Docker Swarm: its stack file and proven running tasks."""

    stack: SwarmStack
    tasks: list[TaskFacts]
    unproven: list[Finding]  # not provable from inside: a warning each


def up(
    inputs: InputOptions, *, swarm: bool, script_args: tuple[str, ...], quiet: bool
) -> Started | Deployed:
    """Start the stack `inputs` name and prove it (a failure raises its DrgpuError, the stack
    brought back down); `script_args` (after `--`) are DRfC's start script's."""
    target = resolved(inputs)
    config = settings(target)
    config.refuse_key_mistakes()
    scripts = drfc_stack.runs_scripts(target, explicit_files=inputs.compose_files is not None)
    drfc_swarm = scripts and config.deploys_to_swarm()  # DRfC's start script deploys
    own_swarm = not drfc_swarm and config.deploys_to_swarm(swarm)
    scripts = scripts and not own_swarm
    if scripts:
        target = drfc_stack.script_target(target, config)
    elif script_args:
        raise ConfigError(
            f"unexpected argument {script_args[0]!r}",
            hint="arguments after `--` are for DRfC's start script, in an activated DRfC shell",
        )
    by_script = scripts and not drfc_swarm  # DRfC's Compose-style start
    with prepare_locked(config, target, swarm=own_swarm, by_script=by_script) as prepared:
        for finding in prepared.plan.warnings:
            warn(finding.message)
        _preflight(prepared.plan)
        if drfc_swarm:  # drgpu's override appended to the start script's `-c` list
            return Deployed(*drfc_stack.swarm_up(prepared, script_args))
        if own_swarm:  # `--swarm` outside DRfC's swarm style: drgpu's own stack file
            return Deployed(*swarm_deploy.up(prepared))
        with UpProgress(quiet=quiet) as progress:
            if scripts:
                return Started(*drfc_stack.up(prepared, script_args, progress))
            return Started(prepared.plan, *compose_run.up(prepared, progress))


def _preflight(plan: Plan) -> None:
    """Say NVML's warnings on the plan's GPUs; raise on a fault (exit 3, `faults.preflight`)."""
    if not any(service.devices for service in plan.services):
        return
    from drgpu.host import nvml  # lazy: as prepare_locked's

    problems, warnings = preflight(plan, nvml.read_health())
    for message in warnings:
        warn(message)
    if problems:
        raise GpuValidationError(
            problems, hint="reset the GPU (`sudo nvidia-smi -r -i N`) or plan without it"
        )
