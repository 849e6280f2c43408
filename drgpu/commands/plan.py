"""`drgpu plan`: which GPUs each service would get, checked against the machine (and, on
Swarm, which GPUs are pinned and which the engine chooses)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from drgpu.commands.options import resolved, settings
from drgpu.commands.preparation import inventory_file_offered, prepare_with
from drgpu.core.findings import Finding
from drgpu.core.inputs import InputOptions
from drgpu.core.model import Plan
from drgpu.core.planning import warning
from drgpu.core.redaction import masked_plan
from drgpu.core.swarm_view import swarm_reasons

if TYPE_CHECKING:
    from drgpu.targets.swarm_stack import SwarmView


@dataclass(frozen=True)
class PlanResult:
    """The plan to show (on Compose with its secret values masked), its Swarm view when
    the stack goes to Swarm, and the warnings about both."""

    plan: Plan
    swarm_view: SwarmView | None
    warnings: tuple[Finding, ...]


def plan(inputs: InputOptions, inventory: Path | None, *, swarm: bool) -> PlanResult:
    """Read the settings, stack and inventory (a topology file, None: this host's), and plan."""
    target = resolved(inputs)
    with inventory_file_offered():
        prepared = prepare_with(
            settings(target), target, inventory, warn_unordered=True, swarm=swarm
        )
    if prepared.config.deploys_to_swarm(swarm):
        from drgpu.commands import swarm_deploy  # lazy: start-up time of a plan on Compose

        view = swarm_deploy.plan_view(prepared, this_host=inventory is None)
        config, reserving = prepared.config, [s.name for s in view.services if s.reserves]
        explicit = config.simulator_devices.selectors or config.simulator_devices.all
        key = config.simulator_key
        setting = f"{key}={config.values.get(key, '')}" if explicit else None
        reasons, said = swarm_reasons(prepared.plan.explanations, reserving, setting)
        swarm_warnings = [warning(config.project, text) for text in (*view.warnings, *said)]
        warnings = (*prepared.plan.warnings, *swarm_warnings)
        return PlanResult(replace(prepared.plan, explanations=reasons), view, warnings)
    return PlanResult(masked_plan(prepared.plan), None, prepared.plan.warnings)
