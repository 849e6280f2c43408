"""What every `plan`, `render` and `up` acts on: settings, stack, inventory and the GPUs other
runs hold, read and planned (`Prepared`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from drgpu.core.compose_stack import Stack
from drgpu.core.device_driver import choose, unnamed_in_spec
from drgpu.core.devices import SelectorKind
from drgpu.core.facts import NodeFacts
from drgpu.core.index_order import bare_indices
from drgpu.core.inputs import Inputs
from drgpu.core.labels import claims
from drgpu.core.model import Claim, Inventory, Plan
from drgpu.core.modes import DeviceDriver
from drgpu.core.planning import make_plan, service_requests, warning
from drgpu.core.settings import Config
from drgpu.errors import ConfigError, DockerError, NvmlUnavailableError
from drgpu.host.files import base_stack_file, hook_installed, load_inventory, load_stack
from drgpu.host.state_files import new_state_dir, override_path, removed_on_failure, stack_path
from drgpu.ui.talk import preload_rich


@dataclass(frozen=True)
class Prepared:
    """Everything `up`, `plan` and `render` act on."""

    config: Config
    stack: Stack
    plan: Plan
    override_path: Path
    target: Inputs
    nodes: tuple[NodeFacts, ...] = ()  # the swarm's, when the simulators' UUIDs may be theirs


def prepare_with(
    config: Config,
    target: Inputs,
    inventory_file: Path | None,
    *,
    stack: Stack | None = None,
    strict: bool = False,
    warn_unordered: bool = False,
    swarm: bool = False,
) -> Prepared:
    """Plan `target`'s stack (read unless given) and inventory with `config`; a problem raises
    its DrgpuError (an unchosen order of bare indices too, unless `warn_unordered`). On this
    host (no inventory file) the plan respects what other runs hold, or warns that the engine
    cannot be asked (`strict`: raises); with `swarm` the simulators may get other nodes' GPUs."""
    stack = _checked_stack(config, target) if stack is None else stack
    inventory = _inventory(config, inventory_file)
    here = inventory_file is None
    nodes = _swarm_nodes(config) if here and config.deploys_to_swarm(swarm) else ()
    # (a trainer whose key is not set chooses a GPU too: never one another run holds)
    chooses = config.trainer_defaulted and bool(inventory.gpus)
    others, blind = _claims(strict) if here and (config.wants_gpu or chooses) else ((), None)
    plan = make_plan(
        config, stack, inventory, others, refuse_unordered=not warn_unordered, nodes=nodes
    )
    if blind is not None:
        plan = replace(plan, warnings=(*plan.warnings, warning(plan.project, blind)))
    return Prepared(
        config=config,
        stack=stack,
        plan=_with_device_driver(config, plan, this_host=here),
        override_path=override_path(target.env_file, config.project),
        target=target,
        nodes=nodes,
    )


@contextmanager
def prepare_locked(
    config: Config, target: Inputs, *, swarm: bool = False, by_script: bool = False
) -> Iterator[Prepared]:
    """`prepare_with` for `up`, under the engine-wide lock until the block ends (no other `up`
    or `down` reads or changes the runs before the proof); refused where its project's
    containers are in the way (`leftovers`). A failure inside removes the file this `up`
    writes (the override, or with `swarm` its Swarm stack file) and a `.drgpu` it made."""
    from drgpu.commands import run_lock  # lazy: start-up time of plan and render (no lock)
    from drgpu.host import nvml  # lazy: start-up time of a plan on a file
    from drgpu.host.process import meanwhile

    with ExitStack() as held:
        held.enter_context(removed_on_failure(made=new_state_dir(target.env_file)))
        # The NVML binding takes a while to import: do it while the engine creates the lock.
        with meanwhile(nvml.preload):
            stack = _checked_stack(config, target)  # bad input: no lock
            held.enter_context(run_lock.locked("up", config))
        override = override_path(target.env_file, config.project)
        written = stack_path(override, config.project) if swarm else override
        with removed_on_failure(written):  # under the lock: no other up's file
            prepared = prepare_with(
                config, target, None, stack=stack, strict=not swarm, swarm=swarm
            )
            if why := leftovers(prepared.plan, by_script=by_script):
                raise DockerError(
                    why, hint="`drgpu down` removes them; `drgpu status` shows the run"
                )
            yield prepared


def leftovers(plan: Plan, *, by_script: bool = False) -> str | None:
    """Why the plan should not start over its project's containers now (`start_refused`)."""
    from drgpu.core.verification import start_refused  # lazy: not for plan, render
    from drgpu.host import engine  # lazy: start-up time of a plan on a file

    return start_refused(plan, engine.project_containers(plan.project), by_script=by_script)


def _checked_stack(config: Config, target: Inputs) -> Stack:
    """The target's stack, its DRGPU_DEVICES_<SERVICE> checked (before NVML is read)."""
    stack = load_stack(stack_files(target))
    service_requests(config, stack)
    return stack


def _with_device_driver(config: Config, plan: Plan, *, this_host: bool) -> Plan:
    """The plan with the device driver its requests name (DRGPU_DEVICE_DRIVER; `auto` asks
    this host's engine, see core.device_driver), and why when it is not the default."""
    daemon = None
    if this_host and config.wants_gpu and config.device_driver is not DeviceDriver.NVIDIA:
        from drgpu.host import engine  # lazy: start-up time of a plan on a file

        with contextlib.suppress(DockerError):  # the claims' warning says it cannot be asked
            daemon = engine.daemon_facts()
    choice = choose(config.device_driver, daemon, hook_installed())
    uuids = [d.uuid for service in plan.services if service.has_gpu for d in service.devices]
    unnamed = unnamed_in_spec(choice.driver, daemon, uuids)
    default = choice.driver is DeviceDriver.NVIDIA and config.device_driver is DeviceDriver.AUTO
    explained = [] if default else [f"device requests: driver {choice.driver} ({choice.why})"]
    return replace(
        plan,
        device_driver=choice.driver,
        explanations=(*plan.explanations, *explained),
        warnings=(*plan.warnings, *([warning(plan.project, unnamed)] if unnamed else [])),
    )


def _swarm_nodes(config: Config) -> tuple[NodeFacts, ...]:
    """The swarm's nodes when the simulators' GPUs are named by UUID (they may be other nodes');
    bare indices, ambiguous where the engine chooses among several nodes' GPUs, are refused."""
    request = config.simulator_devices
    if not request.selectors:
        return ()
    from drgpu.core.swarm_node import swarm_layout
    from drgpu.host import swarm_engine  # lazy: only a swarm's plan asks for its nodes

    facts, _ = swarm_engine.this_swarm()
    nodes = facts.nodes if facts else ()
    generic = not swarm_layout(config.values, facts).pin_simulators
    if generic and bare_indices(request) and sum(bool(n.advertised_gpus) for n in nodes) > 1:
        raise ConfigError(
            f"{config.where(config.simulator_key)}: a bare index is ambiguous on a swarm whose"
            " nodes advertise GPUs: name the simulators' GPUs by UUID",
            hint="`drgpu plan --swarm` lists the GPUs each node advertises",
        )
    return nodes if any(s.kind is SelectorKind.GPU_UUID for s in request.selectors) else ()


def preload_proof() -> None:
    """Import `up`'s proof and the tables that show it (in a thread, while the stack starts)."""
    import drgpu.commands.proving  # noqa: F401  # lazy: only once the stack started

    preload_rich()


def stack_files(target: Inputs) -> tuple[Path, ...]:
    """The compose files of the target's stack: its own, or drgpu's base stack."""
    return target.compose_files or (base_stack_file(),)


def _claims(strict: bool) -> tuple[tuple[Claim, ...], str | None]:
    """What other runs hold (their containers' labels); if the engine cannot be asked,
    nothing and why (`strict`: the error)."""
    from drgpu.host.engine import drgpu_labels  # lazy: start-up time of a plan on a file

    try:
        return claims(drgpu_labels()), None
    except DockerError as exc:
        if strict:
            raise
        return (), f"cannot see what other runs hold ({exc.message}): planned as if none ran"


def _inventory(config: Config, inventory_file: Path | None) -> Inventory:
    """The GPUs to plan against: a file, or NVML; none needed for a CPU-only stack."""
    if inventory_file is not None:
        inventory = load_inventory(inventory_file)
        if inventory.init_error and config.wants_gpu:
            raise NvmlUnavailableError(
                f"{inventory_file}: NVML failed on that machine ({inventory.init_error})"
            )
        return inventory
    from drgpu.host import nvml  # lazy: start-up time of a plan on a file (as below)

    if not config.wants_gpu:
        # Nothing needs NVML, but a trainer on the CPU of a machine with GPUs is said.
        try:
            return nvml.read_inventory()
        except NvmlUnavailableError as exc:
            return Inventory(gpus=(), init_error=exc.message)
    inventory = nvml.read_inventory()
    asks_index = any(bare_indices(r) for r in (config.trainer_devices, config.simulator_devices))
    if asks_index and len(inventory.gpus) > 1:
        from drgpu.host.cuda import default_order  # lazy: start-up time of a plan on a file

        inventory = replace(inventory, cuda_order=default_order(inventory))
    return inventory


@contextmanager
def inventory_file_offered() -> Iterator[None]:
    """For commands that take --inventory: NVML failing inside the block hints at it."""
    try:
        yield
    except NvmlUnavailableError as exc:
        offer = "plan for a machine described in a file: --inventory FILE"
        hint = f"{exc.hint}; or {offer}" if exc.hint else offer
        raise NvmlUnavailableError(exc.message, hint=hint) from None
