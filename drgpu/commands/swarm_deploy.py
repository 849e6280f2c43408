"""`drgpu up` and `down` on Swarm, around `targets.swarm_stack`: render, `docker stack deploy`,
wait, verify, `stack rm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from drgpu.core.inputs import Inputs
from drgpu.core.service_gpus import SwarmStack
from drgpu.core.settings import Config
from drgpu.core.swarm_node import swarm_layout
from drgpu.errors import DockerError
from drgpu.host import compose, process, swarm, swarm_engine
from drgpu.host.state_files import override_path, stack_path, write_owned_file, written_by_drgpu
from drgpu.targets.swarm_stack import SwarmView, render_stack, swarm_services
from drgpu.ui.talk import spinner, warn

if TYPE_CHECKING:
    from drgpu.commands.preparation import Prepared
    from drgpu.core.facts import EngineFacts, TaskFacts
    from drgpu.core.findings import Finding


def render(prepared: Prepared, facts: EngineFacts | None) -> SwarmStack:
    """The stack file of a prepared plan (reads the stack through `compose config`), laid
    out for the swarm the engine's `facts` describe (None: a one-node swarm, node unknown)."""
    plan, config = prepared.plan, prepared.config
    layout = swarm_layout(config.values, facts)
    model = compose.resolve_stack(config, prepared.stack.files)
    services = swarm_services(plan, model["services"], config.simulators, layout, prepared.nodes)
    return render_stack(plan, model, services, layout, config.secrets)


def plan_view(prepared: Prepared, *, this_host: bool) -> SwarmView:
    """How the plan's services would get their GPUs on the swarm (this engine's, with its
    nodes on a manager, when planned on this host; else a one-node swarm)."""
    facts, blind = swarm_engine.this_swarm() if this_host else (None, None)
    layout = swarm_layout(prepared.config.values, facts)
    names = [service.name for service in prepared.stack.services]
    nodes = prepared.nodes or (facts.nodes if facts else ())
    services = swarm_services(prepared.plan, names, prepared.config.simulators, layout, nodes)
    from drgpu.core.verification import short_of_gpus  # lazy: as `up`'s check_node

    said = (blind, short_of_gpus(services, nodes))
    return SwarmView(services, layout, tuple(text for text in said if text), nodes)


def up(prepared: Prepared) -> tuple[SwarmStack, list[TaskFacts], list[Finding]]:
    """Render, deploy, and prove every task (`proving.proven_tasks`); on any failure or caught
    signal the stack is removed, waited for, then the run's containers and networks."""
    # lazy: start-up time of plan and render, which never deploy
    from drgpu.commands.preparation import preload_proof
    from drgpu.commands.rollback import rolled_back
    from drgpu.core.verification import check_node

    facts = swarm_engine.engine_facts()
    stack = render(prepared, facts)
    check_node(stack, facts)
    path = stack_path(prepared.override_path, prepared.plan.project)
    write_owned_file(path, stack.text)  # mode 600: secrets stay
    environment = compose.compose_environment(prepared.config.values)
    project = prepared.plan.project
    with (
        rolled_back(project, lambda: _remove_after_failure(project, environment)),
        spinner(f"deploying {project} to the swarm"),
    ):
        with process.meanwhile(preload_proof):
            swarm.deploy(project, path, environment)
        from drgpu.commands.proving import proven_tasks  # imported meanwhile, above

        tasks, unproven = proven_tasks(prepared.plan, stack)
    return stack, tasks, unproven


def _remove_after_failure(project: str, environment: Mapping[str, str]) -> None:
    """Remove what a failed deploy left; the failure itself is the error to report (a
    node that is no manager cannot deploy, nor remove)."""
    try:
        swarm.remove_stack(project, environment)
    except DockerError as exc:
        warn(f"after the failure, {exc.message}")


def down(config: Config, target: Inputs) -> None:
    """Under the engine-wide lock (`run_lock`), remove the stack, waited for until all of it
    is gone; then its stack file (it holds the settings' secrets) when drgpu wrote it."""
    from drgpu.commands.run_lock import down_locked  # lazy: start-up time of plan and render

    stack = stack_path(override_path(target.env_file, config.project), config.project)
    with down_locked(config, target):
        with spinner(f"removing {config.project} from the swarm"):
            swarm.remove_stack(config.project, compose.compose_environment(config.values))
        if stack.is_file() and written_by_drgpu(stack):
            stack.unlink()
