"""From settings, a stack and an inventory to a plan: who gets which GPU, checked."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace

from drgpu.core.compose_stack import SIMULATOR_SERVICE, Stack, StackService
from drgpu.core.devices import (
    DeviceRequest,
    SelectorKind,
    describe_gpu,
    describe_inventory,
    resolve,
)
from drgpu.core.facts import NodeFacts, advertised
from drgpu.core.findings import Finding, Level
from drgpu.core.index_order import bare_indices, cuda_order, in_cuda_order, index_notes
from drgpu.core.labels import run_labels
from drgpu.core.model import Assignment, Claim, Gpu, Inventory, Plan, Role, ServicePlan
from drgpu.core.modes import IndexOrder, Sharing
from drgpu.core.placement import (
    WORKER_MEMORY_MIB,
    Choice,
    busy_gpus,
    choose_simulators,
    choose_trainer,
    locate,
    overlaps,
    place_workers,
    short,
)
from drgpu.core.settings import (
    SERVICE_DEVICES_PREFIX,
    SIMULATOR_DEVICES_KEY,
    TRAINER_DEVICES_KEY,
    Config,
    ServiceDevices,
    service_devices_key,
)
from drgpu.core.sharing import GPU_CAPABILITIES, apply_sharing, users
from drgpu.errors import ConfigError, GpuValidationError

TRAINER_MIN_MEMORY_MIB = 8 * 1024
ORDER_NOTE = (
    "GPU indices are nvidia-smi's (PCI bus order), not CUDA's default fastest-first order;"
    " drgpu renders full UUIDs and sets CUDA_DEVICE_ORDER=PCI_BUS_ID"
)
CUDA_ORDER_NOTE = (
    "bare indices in the settings are read in CUDA's default fastest-first order"
    " (DRGPU_INDEX_ORDER=cuda); the GPUs shown here carry nvidia-smi's index (PCI bus"
    " order); drgpu renders full UUIDs and sets CUDA_DEVICE_ORDER=PCI_BUS_ID"
)
RUNS_HINT = (
    "stop the other run first (`drgpu down` with its settings), choose another GPU,"
    " or write `auto` to let drgpu choose a free one"
)


def warning(subject: str, message: str) -> Finding:
    """A warning about a plan (`subject`: its project), as `plan --json` lists it."""
    return Finding(subject, Level.WARN, message, kind="plan-warning")


class _Notes:
    """What planning found on the way: problems stop it, the rest goes into the plan.
    `lookup_fix` helps where no GPU matches a request."""

    def __init__(self, subject: str, lookup_fix: str) -> None:
        self.subject, self.lookup_fix = subject, lookup_fix
        self.problems: list[Finding] = []
        self.warnings: list[Finding] = []
        self.explanations: list[str] = []

    def warn(self, *messages: str) -> None:
        self.warnings.extend(warning(self.subject, message) for message in messages)

    def fail(self, message: str, fix: str | None = None) -> None:
        self.problems.append(Finding(self.subject, Level.FAIL, message, fix, kind="plan-problem"))

    def refuse(self, fallback: str) -> None:
        """Raise every problem found at once, hinting their fixes (else `fallback`)."""
        if self.problems:
            fixes = dict.fromkeys(problem.fix for problem in self.problems if problem.fix)
            raise GpuValidationError(
                [problem.message for problem in self.problems],
                hint="; or ".join(fixes) or fallback,
                findings=self.problems,
            )


_Asked = tuple[str, str, DeviceRequest]  # who asks, under which key, for what
_Devices = tuple[Assignment, ...]  # the GPUs (or MIG devices) one request gets


def make_plan(
    config: Config,
    stack: Stack,
    inventory: Inventory,
    claims: Sequence[Claim] = (),
    *,
    refuse_unordered: bool = False,
    nodes: Sequence[NodeFacts] = (),
) -> Plan:
    """Each service's devices, checked against the machine and what other runs hold (`claims`,
    from their labels); the simulators may name GPUs other swarm `nodes` advertise. With
    `refuse_unordered`, bare indices CUDA's order reads otherwise are a ConfigError unless
    DRGPU_INDEX_ORDER is chosen. Every problem is raised at once (`GpuValidationError`)."""
    own = service_requests(config, stack)
    requests: list[_Asked] = [
        ("the trainer", config.trainer_key, config.trainer_devices),
        ("the simulator", config.simulator_key, config.simulator_devices),
        *((f"service {name}", asked.key, asked.request) for name, asked in own.items()),
    ]
    _refuse_cuda_strings(config, requests, inventory)
    lookup_fix = (
        "`drgpu gpus` lists this machine's GPUs; a bare index is nvidia-smi's"
        if config.index_order == IndexOrder.PCI
        else "`drgpu gpus` lists this machine's GPUs, CUDA's order in column CUDA"
    )
    if nodes:
        lookup_fix += "; or the swarm's nodes: " + "; ".join(advertised(nodes))
    notes = _Notes(config.project, lookup_fix)
    index_note = CUDA_ORDER_NOTE if config.index_order == IndexOrder.CUDA else ORDER_NOTE
    notes.warn(*config.key_mistakes)
    has_trainer = bool(stack.names(Role.TRAINER) or stack.names(Role.TRAINER_LAUNCHER))
    trains = has_trainer and not config.evaluation
    # the keys in use: the trainer's only where a trainer trains
    asked = [(key, ask) for _who, key, ask in requests if trains or key != config.trainer_key]
    if any(bare_indices(request) for _key, request in asked):
        warned, explained = index_notes(
            asked,
            inventory,
            cuda_order(inventory),
            config.index_order,
            chosen=config.index_order_chosen,
            refuse=refuse_unordered,
            drfc="DR_DIR" in config.values,  # an activated DRfC shell, whose docs mean CUDA's
        )
        if warned:
            notes.warn(warned)
        if explained:
            notes.explanations.append(explained)
    trainer, simulator, owned = _devices(
        config, inventory, claims, nodes, own, notes, trains=trains
    )
    chosen = zip(requests, (trainer, simulator, *owned.values()), strict=True)
    _check_overlaps(config, [(who, key, devices) for (who, key, _), devices in chosen], notes)
    notes.refuse(index_note)
    services = _services(config, stack, trainer, simulator, owned, notes)
    shared = apply_sharing(config, stack, services)
    for problem in shared.problems:
        notes.fail(problem)
    notes.warn(*shared.warnings)
    notes.explanations.extend(shared.explanations)
    _other_runs(config, shared.services, inventory, claims, notes)
    notes.refuse(index_note)
    notes.warn(*_memory_warnings(trainer, shared.services))
    notes.warn(*_unused_requests(config, stack, has_trainer=has_trainer))
    if config.host_x:  # Gazebo renders on the X server's GPU: named; a warning where not ours
        if x_server := x_server_warning(inventory, [a.gpu for a in simulator]):
            notes.warn(x_server)
        else:
            notes.explanations.append(f"DR_HOST_X: {x_server_text(inventory)}, the simulator's")
    return Plan(
        project=config.project,
        run_id=config.run_key,
        services=shared.services,
        warnings=tuple(notes.warnings),
        explanations=tuple(notes.explanations),
        sharing=config.sharing,
        tmpfs_volumes=shared.tmpfs_volumes,
        index_note=index_note,
        index_order=config.index_order,
    )


def _remote(inventory: Inventory, nodes: Sequence[NodeFacts]) -> Inventory:
    """The inventory and the GPUs other nodes advertise (index -1, memory unknown: 0)."""
    there = tuple(
        Gpu(-1, uuid, f"on {node.name}", "", 0)
        for node in nodes
        for uuid in node.advertised_gpus
        if locate(uuid, inventory) is None
    )
    return replace(inventory, gpus=(*inventory.gpus, *there)) if there else inventory


def _devices(
    config: Config,
    inventory: Inventory,
    claims: Sequence[Claim],
    nodes: Sequence[NodeFacts],
    own: Mapping[str, ServiceDevices],
    notes: _Notes,
    *,
    trains: bool,
) -> tuple[_Devices, _Devices, dict[str, _Devices]]:
    """The trainer's, the simulators' and each `own` service's devices: those written resolved,
    then each `auto` chosen: the trainer's (where it `trains`), the services', the simulators'."""
    trainer = _resolve(config, config.trainer_key, config.trainer_devices, inventory, notes)
    if config.evaluation and trainer:
        # DeepRacer-for-cloud's evaluation trains nothing: its rl_coach only says so.
        notes.explanations.append(f"evaluation: no trainer, {config.trainer_key} is not used")
        trainer = ()
    simulator = _resolve(
        config, config.simulator_key, config.simulator_devices, _remote(inventory, nodes), notes
    )
    where = {device.gpu.name if device.gpu.index < 0 else "this node" for device in simulator}
    if len(where) > 1:  # one service, one constraint
        notes.fail(
            f"{config.where(config.simulator_key)}: names GPUs {', '.join(sorted(where))}:"
            " the simulators' GPUs must all be on one node"
        )
    owned = {
        name: _resolve(config, request.key, request.request, inventory, notes)
        for name, request in own.items()
    }
    busy = busy_gpus(inventory, claims, config.run_key)
    may_share = config.sharing != Sharing.EXCLUSIVE

    def choose(who: str, taken_by: str, *taken: _Devices) -> Choice:
        uuids = {device.gpu.uuid for devices in taken for device in devices}
        return choose_trainer(inventory, busy, uuids, may_share, who=who, taken_by=taken_by)

    problem = None  # why an unset trainer key found no GPU
    if config.trainer_devices.auto and trains:
        by = "another service of this stack" if any(owned.values()) else "the simulator"
        choice = choose("the trainer", by, simulator, *owned.values())
        if config.trainer_defaulted:  # (said in a warning, below)
            trainer, problem = choice.devices, choice.problem
        else:
            trainer = _chosen(config, config.trainer_key, "trainer", choice, notes)
    for name, request in own.items():
        if request.request.auto and not notes.problems:
            by = "another service of this stack"
            choice = choose(f"service {name}", by, trainer, simulator, *owned.values())
            owned[name] = _chosen(config, request.key, name, choice, notes)
    if config.simulator_devices.auto and not notes.problems:
        others = tuple(device for devices in owned.values() for device in devices)
        choice = choose_simulators(inventory, busy, trainer, may_share, others)
        simulator = _chosen(config, config.simulator_key, "simulators", choice, notes)
    if trains and (said := _trainer_warning(config, inventory, trainer, problem)):
        notes.warn(said)
    return trainer, simulator, owned


def _trainer_warning(
    config: Config, inventory: Inventory, trainer: _Devices, problem: str | None
) -> str | None:
    """What an unset trainer key gave the trainer (as `auto` chooses, or the CPU where no GPU
    is free: `problem`), or a trainer set to the CPU though this machine has GPUs."""
    key, usable = config.trainer_key, [gpu for gpu in inventory.gpus if not gpu.lost]
    if not config.trainer_defaulted:
        if trainer or not usable:
            return None
        written = config.values.get(key, "").strip() or "empty"
        return (
            f"the trainer runs on the CPU ({config.where(key)}={written}) though"
            f" this machine has {len(usable)} GPU(s): DeepRacer training on a CPU takes days,"
            f" not hours; set {key} to its GPU(s), or auto"
        )
    if trainer:
        chosen = ", ".join(short(device) for device in trainer)
        return (
            f"{key} is not set: the trainer gets {chosen}, as `auto` chooses"
            f" (DeepRacer-for-cloud would give it every GPU); set {key} to choose"
        )
    if inventory.gpus:
        return (
            f"{key} is not set and no GPU is free for the trainer ({problem}):"
            f" it runs on the CPU, days instead of hours; set {key} to its GPU(s)"
        )
    if inventory.init_error:  # (on a machine without GPUs the CPU is no surprise)
        return (
            f"{key} is not set and NVML cannot tell this machine's GPUs"
            f" ({inventory.init_error}): the trainer runs on the CPU; set {key}"
        )
    return None


def _refuse_cuda_strings(config: Config, requests: list[_Asked], inventory: Inventory) -> None:
    """torch's `cuda:N` in a device value is a `ConfigError` naming what to write instead:
    the nvidia-smi index and UUID of CUDA's GPU N here (or N itself, read in CUDA's order)."""
    for _who, key, request in requests:
        for selector in request.selectors:
            if selector.kind is SelectorKind.CUDA_ORDINAL:
                raise ConfigError(
                    f"{config.where(key)}: {selector.text!r} is torch's device string,"
                    f" not a device list: {_cuda_meaning(config, inventory, selector.index)}",
                    hint="`drgpu gpus` shows each GPU's nvidia-smi index and CUDA's (column CUDA)",
                )


def _cuda_meaning(config: Config, inventory: Inventory, ordinal: int) -> str:
    """What to write for CUDA's GPU `ordinal` on this machine."""
    if config.index_order == IndexOrder.CUDA:
        return f"write {str(ordinal)!r} (DRGPU_INDEX_ORDER=cuda reads it in CUDA's order)"
    order = cuda_order(inventory)
    if ordinal >= len(order.indices):
        return f"CUDA has no GPU {ordinal} here; {describe_inventory(inventory)}"
    gpu = next(gpu for gpu in inventory.gpus if gpu.index == order.indices[ordinal])
    guessed = "" if order.known else " (CUDA's order guessed)"
    return (
        f"CUDA's GPU {ordinal}{guessed} is the {gpu.name}: write its nvidia-smi index"
        f" {str(gpu.index)!r} or its UUID {gpu.uuid}"
    )


def _resolve(
    config: Config, key: str, request: DeviceRequest, inventory: Inventory, notes: _Notes
) -> _Devices:
    if config.index_order == IndexOrder.CUDA and bare_indices(request):
        request, unread = in_cuda_order(request, cuda_order(inventory))
        for problem in unread:
            notes.fail(f"{config.where(key)}: {problem}")
    assignments, found = resolve(request, inventory)
    for problem in found:
        fix = notes.lookup_fix if problem.startswith("no GPU matches") else None
        notes.fail(f"{config.where(key)}: {problem}", fix)
    if request.all and not assignments:
        notes.fail(f"{config.where(key)}: 'all' asks for GPUs, but this machine has none")
    return tuple(assignments)


def _chosen(config: Config, key: str, role: str, choice: Choice, notes: _Notes) -> _Devices:
    if choice.problem is not None:
        notes.fail(f"{config.where(key)}: {choice.problem}")
        return ()
    chosen = ", ".join(short(device) for device in choice.devices)
    notes.explanations.append(f"{role} (auto): {chosen}: {choice.reason}")
    return choice.devices


def _check_overlaps(
    config: Config, chosen: Sequence[tuple[str, str, _Devices]], notes: _Notes
) -> None:
    """Each GPU chosen under two keys (who, key, devices) is refused (exclusive) or shared
    (with a warning for timeslice)."""
    for (who, key, mine), (other, other_key, theirs) in itertools.combinations(chosen, 2):
        for device in (d for d in mine if any(overlaps(d, their) for their in theirs)):
            both = (
                f"{describe_gpu(device.gpu)} is asked for by both {who}"
                f" ({config.where(key)}) and {other} ({config.where(other_key)})"
            )
            if config.sharing == Sharing.EXCLUSIVE:
                notes.fail(
                    f"{both}; DRGPU_SHARING=exclusive gives each GPU to one of them",
                    f"give {who} or {other} another GPU, or set"
                    " DRGPU_SHARING=timeslice to let them share it",
                )
            elif config.sharing == Sharing.TIMESLICE:
                notes.warn(
                    f"{both}; DRGPU_SHARING=timeslice: they take turns on it, and their"
                    " frameworks are told to grow their memory instead of taking it all"
                )


def service_requests(config: Config, stack: Stack) -> dict[str, ServiceDevices]:
    """Each `DRGPU_DEVICES_<SERVICE>` key with the service it names; a key that names no
    service of the stack, or a service with a role of its own, is a `ConfigError`."""
    found: dict[str, ServiceDevices] = {}
    for request in config.service_devices:
        where = config.where(request.key)
        services = [s for s in stack.services if service_devices_key(s.name) == request.key]
        if not services:
            import difflib  # lazy: only a key naming no service needs it

            prefix = SERVICE_DEVICES_PREFIX
            keys = {service_devices_key(s.name).removeprefix(prefix): s for s in stack.services}
            close = difflib.get_close_matches(request.key.removeprefix(prefix), keys)
            meant = _key_of(config, keys[close[0]]) if close else None
            names = ", ".join(service.name for service in stack.services) or "none"
            known = f"; did you mean {meant}?" if meant else ""
            raise ConfigError(
                f"{where} names no service of the stack" + (known or f" (its services: {names})"),
                hint="the key is DRGPU_DEVICES_ and the service's name upper-cased,"
                " '-' and '.' written '_'",
            )
        if len(services) > 1:
            names = ", ".join(service.name for service in services)
            raise ConfigError(f"{where} names several services: {names}")
        service = services[0]
        if service.role is not Role.OTHER:
            role, source = _role_source(config, service.role)
            raise ConfigError(
                f"{where}: service {service.name} would have two roles: it is {role}"
                f" ({service.role_source}), whose GPUs come from {source}",
                hint=f"remove {request.key}, or declare `drgpu.role: none` on {service.name}"
                " to give it GPUs of its own",
            )
        found[service.name] = request
    return found


def _role_source(config: Config, role: Role) -> tuple[str, str]:
    """A role's name in a message, and where its GPUs come from (a key, for all but MPS)."""
    return {
        Role.TRAINER: ("the trainer", config.trainer_key),
        Role.TRAINER_LAUNCHER: ("the trainer's launcher", config.trainer_key),
        Role.SIMULATOR: ("a simulator", config.simulator_key),
        Role.MPS_DAEMON: ("drgpu's MPS daemon", "the GPUs its clients share (DRGPU_SHARING=mps)"),
    }[role]


def _key_of(config: Config, service: StackService) -> str | None:
    """The key that sets `service`'s GPUs: its own, or its role's (a key of its own would
    give it two roles); None for drgpu's MPS daemon, which no key sets."""
    if service.role is Role.OTHER:
        return service_devices_key(service.name)
    role, source = _role_source(config, service.role)
    return None if service.role is Role.MPS_DAEMON else f"{source} ({service.name} is {role})"


def _workers(config: Config, stack: Stack, notes: _Notes) -> list[tuple[StackService, int]]:
    """The simulator workers (service, slot): the stack's own robomaker-N, else DR_WORKERS
    copies of its simulator (robomaker, else its one service of role simulator), else none."""
    simulators = [service for service in stack.services if service.role is Role.SIMULATOR]
    numbered = sorted(
        (s for s in simulators if s.worker_slot is not None), key=lambda s: s.worker_slot or 0
    )
    if numbered:
        if len(numbered) != config.workers:
            names = ", ".join(service.name for service in numbered)
            notes.warn(
                f"{config.where('DR_WORKERS')} is {config.workers}, but the stack defines"
                f" {len(numbered)} simulator worker(s) itself ({names}): drgpu places those"
            )
        return [(s, s.worker_slot or 0) for s in numbered]
    base = stack.service(SIMULATOR_SERVICE)
    if base is None or base.role is not Role.SIMULATOR:
        base = simulators[0] if len(simulators) == 1 else None
    if base is None or config.workers == 1 or config.evaluation:
        # (DeepRacer-for-cloud evaluates with one simulator, whatever DR_WORKERS says)
        if base is None and config.workers > 1 and simulators:
            names = ", ".join(service.name for service in simulators)
            notes.warn(
                f"{config.where('DR_WORKERS')} is {config.workers}, but the stack has"
                f" {len(simulators)} simulator services ({names}):"
                " each runs once, and drgpu makes no workers of them"
            )
        return []
    return [(base, slot) for slot in range(1, config.workers + 1)]


def _services(
    config: Config,
    stack: Stack,
    trainer: _Devices,
    simulator: _Devices,
    owned: Mapping[str, _Devices],
    notes: _Notes,
) -> tuple[ServicePlan, ...]:
    """Every service's plan, in the stack's order, with the workers where their simulator
    is; `owned`: the GPUs of the services with a `DRGPU_DEVICES_<SERVICE>` key."""
    workers = _workers(config, stack, notes)
    reserved = {device.uuid: TRAINER_MIN_MEMORY_MIB for device in trainer}
    placed = place_workers(simulator, max(len(workers), 1), config.worker_placement, reserved)

    def placed_on(index: int, source: StackService, slot: int | None = None) -> ServicePlan:
        """`source` (or its worker in `slot`) on the `index`th placed GPU, if any, said why."""
        if not placed:
            return _service_plan(config, source, (), slot)
        device, reason = placed[index]
        plan = _service_plan(config, source, (device,), slot)
        notes.explanations.append(f"{plan.name}: {short(device)}: {reason}")
        return plan

    worker_plans = [placed_on(index, *worker) for index, worker in enumerate(workers)]
    by_name = {plan.name: plan for plan in worker_plans}
    copied = workers[0][0] if workers and workers[0][0].worker_slot is None else None
    plans: list[ServicePlan] = []
    for source in stack.services:
        if source.role is Role.MPS_DAEMON:
            continue  # planned with the sharing (drgpu.sharing)
        if source.name in by_name:
            plans.append(by_name[source.name])
        elif source is copied:  # kept from starting: its workers run instead
            note = (
                f"not started: {source.name}-1 ... {source.name}-{len(workers)}"
                f" run instead (DR_WORKERS={len(workers)})"
            )
            plan = _service_plan(config, source, ())
            plans += [replace(plan, reset_keys=(), note=note, replicas=0), *worker_plans]
        elif source.role in (Role.TRAINER, Role.TRAINER_LAUNCHER):
            plans.append(_service_plan(config, source, trainer))
        elif source.role is Role.SIMULATOR:  # no worker: what is written, or auto's one GPU
            auto = config.simulator_devices.auto  # (never more GPUs than workers)
            plans.append(placed_on(0, source) if auto else _service_plan(config, source, simulator))
        else:
            plans.append(_service_plan(config, source, owned.get(source.name, ())))
    return tuple(plans)


def _service_plan(
    config: Config, source: StackService, devices: _Devices, slot: int | None = None
) -> ServicePlan:
    """What `source` (or its worker in `slot`) gets: its devices, said in its environment
    and labels; the keys of its own that would contradict them reset."""
    role, uuids = source.role, ",".join(device.uuid for device in devices)
    launcher = role is Role.TRAINER_LAUNCHER
    given, forwarded = ("", uuids) if launcher else (uuids, "")  # its own GPUs, its trainer's
    environment: dict[str, str] = {}
    if devices or launcher:
        environment = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": uuids}
    environment["NVIDIA_VISIBLE_DEVICES"] = given or "void"
    capabilities: tuple[str, ...] = GPU_CAPABILITIES
    if role is Role.SIMULATOR:
        capabilities = (*GPU_CAPABILITIES, "graphics", *(["display"] if config.host_x else []))
    copy = slot is not None and source.worker_slot is None  # a worker made of `source`
    resets = {
        "deploy.resources.reservations.devices": not given and source.has_device_requests,
        "gpus": source.has_gpus_key,
        "container_name": copy and "container_name" in source.keys,  # copies cannot share it
    }
    if slot is not None:
        environment["DOCKER_REPLICA_SLOT"] = str(slot)
    return ServicePlan(
        name=f"{source.name}-{slot}" if copy else source.name,
        role=role,
        devices=devices,
        capabilities=capabilities if given else (),
        environment=tuple(environment.items()),
        labels=run_labels(config.run_key, config.sharing, role, given, forwarded=forwarded),
        reset_keys=tuple(key for key, reset in resets.items() if reset),
        note=_launcher_note(config, source.name) if launcher else None,
        replicas=1 if copy else None,
        extends=source.name if copy else None,
        extends_files=tuple(map(str, source.files)) if copy else (),
    )


def _launcher_note(config: Config, name: str) -> str:
    """What the trainer's launcher does: in an evaluation it starts no trainer."""
    if config.evaluation:
        return f"evaluation: starts no trainer; {name} gets no GPU"
    return (
        "starts the trainer through SageMaker local mode and forwards its"
        f" CUDA_VISIBLE_DEVICES; {name} itself gets no GPU"
    )


def _other_runs(
    config: Config,
    services: Sequence[ServicePlan],
    inventory: Inventory,
    claims: Sequence[Claim],
    notes: _Notes,
) -> None:
    """Check the plan against GPUs other runs hold."""
    mine = users(services)
    held: dict[tuple[str, str], tuple[Claim, dict[str, None]]] = {}  # their services, in order
    for claim in (claim for claim in claims if claim.run_id != config.run_key):
        for theirs in filter(None, (locate(uuid, inventory) for uuid in claim.uuids)):
            for uuid, (device, _services) in mine.items():
                if overlaps(device, theirs):
                    held.setdefault((uuid, claim.run_id), (claim, {}))[1][claim.service] = None
    for (uuid, run), (claim, their_services) in held.items():
        device, planned = mine[uuid]
        names = ", ".join(service.name for service in planned)
        message = (
            f"{describe_gpu(device.gpu)}, planned for {names}, is held by run {run!r}"
            f" ({', '.join(their_services)})"
        )
        if config.sharing == Sharing.TIMESLICE and claim.sharing == Sharing.TIMESLICE:
            notes.warn(f"{message}; both runs use DRGPU_SHARING=timeslice: shared")
        else:
            why = (
                f", which does not share it (DRGPU_SHARING={claim.sharing} there)"
                if config.sharing == Sharing.TIMESLICE
                else f"; DRGPU_SHARING={config.sharing} does not share GPUs between runs"
            )
            notes.fail(message + why, RUNS_HINT)


def _memory_warnings(trainer: _Devices, services: Sequence[ServicePlan]) -> list[str]:
    warnings = [
        f"the trainer's GPU {device.gpu.index} ({device.gpu.name},"
        f" {device.memory_total_mib} MiB) has under 8 GiB; DeepRacer training needs about 8 GiB"
        for device in trainer
        if device.memory_total_mib < TRAINER_MIN_MEMORY_MIB
    ]
    simulators = [s for s in services if s.role is Role.SIMULATOR and not s.disabled]
    return warnings + [
        f"the simulator's GPU {device.gpu.index} ({device.gpu.name},"
        f" {device.memory_total_mib} MiB) has under 1 GiB for each of {len(on)} worker(s)"
        for device, on in users(simulators).values()
        if 0 < device.memory_total_mib < WORKER_MEMORY_MIB * len(on)
    ]


def _unused_requests(config: Config, stack: Stack, *, has_trainer: bool) -> list[str]:
    warnings = []
    if config.trainer_devices.wants_gpu and not has_trainer and not config.trainer_defaulted:
        trainers = (
            "sagemaker or rl_coach service"
            if config.trainer_key == TRAINER_DEVICES_KEY
            else "trainer (sagemaker, rl_coach, or a service with drgpu.role: trainer)"
        )
        warnings.append(
            f"{config.where(config.trainer_key)} is set, but the stack has no {trainers}"
        )
    if config.simulator_devices.wants_gpu and not stack.names(Role.SIMULATOR):
        simulators = (
            "robomaker service"
            if config.simulator_key == SIMULATOR_DEVICES_KEY
            else "simulator (robomaker, or a service with drgpu.role: simulator)"
        )
        warnings.append(
            f"{config.where(config.simulator_key)} is set, but the stack has no {simulators}"
        )
    return warnings


def x_server_text(inventory: Inventory) -> str:
    """The GPUs NVML shows a graphics process on (an X server, e.g. Xorg), with their PIDs."""
    graphics = {g: [str(p.pid) for p in g.processes if "G" in p.kind] for g in inventory.gpus}
    return "; ".join(
        f"the X server renders on GPU {gpu.index} ({gpu.name}: graphics PID {', '.join(pids)})"
        for gpu, pids in graphics.items()
        if pids
    )


def x_server_warning(inventory: Inventory, simulator: Sequence[Gpu]) -> str | None:
    """Why the X server's GPU, which Gazebo renders on with DR_HOST_X=True, is not (or may
    not be) the `simulator`'s; None where it is."""
    shown = x_server_text(inventory)
    given = ", ".join(f"GPU {gpu.index} ({gpu.name})" for gpu in simulator) or "none"
    where = {gpu.index for gpu in inventory.gpus if any("G" in p.kind for p in gpu.processes)}
    if where and where <= {gpu.index for gpu in simulator}:
        return None
    return (
        f"DR_HOST_X=True sends Gazebo's OpenGL through the host's X server: {shown}, not the"
        f" simulator's {given}"
        if shown
        else "DR_HOST_X=True sends Gazebo's OpenGL through the host's X server, but no GPU"
        f" shows a graphics process (is it running, on an NVIDIA GPU?): the simulator's"
        f" {given} may not be the one that renders"
    )
