"""A plan's services as an orchestrator (Swarm, Kubernetes) deploys them, simulator workers
as replicas; and what drgpu expects of a deployed Swarm stack (proved by core.verification)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from drgpu.core import labels
from drgpu.core.model import Plan, Role
from drgpu.core.modes import Sharing
from drgpu.core.swarm_node import PINNED_VARIABLE, SwarmLayout

TEMPLATED_KEYS = ("CUDA_VISIBLE_DEVICES", PINNED_VARIABLE)
ONE_NODE = SwarmLayout()


@dataclass(frozen=True)
class ServiceGpus:
    """One service and its GPUs per task: `gpus` per task, `replicas` (None: none),
    `pinned[i]` the GPUs of slot i+1 (one entry without replicas; none without GPUs)."""

    name: str
    role: Role
    gpus: int
    replicas: int | None
    pinned: tuple[tuple[str, ...], ...] = ()

    def pinned_for(self, slot: int) -> tuple[str, ...] | None:
        """The GPUs pinned for the task in `slot`; None when none are pinned for it."""
        if len(self.pinned) == 1:
            return self.pinned[0]
        return self.pinned[slot - 1] if 0 < slot <= len(self.pinned) else None


def service_gpus(plan: Plan, names: Collection[str], workers: int) -> tuple[ServiceGpus, ...]:
    """Each planned service of the stack (`names`: its file's), the simulator workers as
    replicas of its one simulator service, a slot each (several simulators: each its own)."""
    simulators = [s for s in plan.services if s.role is Role.SIMULATOR]
    single = sum(s.name in names for s in simulators) == 1
    per_worker = max((len(s.devices) for s in simulators if s.has_gpu), default=0)
    by_slot = tuple(
        tuple(device.uuid for device in s.devices)
        for s in simulators
        if s.has_gpu and s.name not in names
    )
    shapes = []
    for service in (s for s in plan.services if s.name in names):
        uuids = tuple(device.uuid for device in service.devices) if service.has_gpu else ()
        replicas, gpus = None, len(uuids)
        pinned: tuple[tuple[str, ...], ...] = (uuids,) if uuids else ()
        if service.role is Role.SIMULATOR and single:
            replicas, gpus, pinned = workers, per_worker, by_slot or pinned
        shapes.append(
            ServiceGpus(service.name, service.role, gpus, replicas, pinned if gpus else ())
        )
    return tuple(shapes)


def own_gpus_environment(gpus: int) -> dict[str, str]:
    """A container that sees only its `gpus` GPUs: CUDA's 0..gpus-1, in PCI bus order."""
    return {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(str(index) for index in range(gpus)),
    }


@dataclass(frozen=True, kw_only=True)
class SwarmService(ServiceGpus):
    """What drgpu sets on one service of the stack: its GPUs per task (`pinned` is empty
    when it reserves `gpus` generic resources), environment, labels and constraints."""

    environment: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]
    constraints: tuple[str, ...]

    @property
    def forwarded(self) -> tuple[str, ...]:
        """The GPUs this service forwards to the trainer it starts (rl_coach), by UUID."""
        return labels.split_list(dict(self.labels).get(labels.FORWARDED_GPUS))

    @property
    def node(self) -> str | None:
        """The node its `node.id == <id>` constraint pins it to, if any."""
        ids = (c.partition("== ")[2] for c in self.constraints if c.startswith("node.id =="))
        return next(ids, None)

    @property
    def reserves(self) -> bool:
        """Whether the engine chooses this service's GPUs (generic resources)."""
        return self.gpus > 0 and not self.pinned

    def environment_for(self, slot: int) -> dict[str, str]:
        """The environment a task in `slot` gets, its templates expanded as Swarm does."""
        environment = dict(self.environment)
        if len(self.pinned) > 1:
            pinned = ",".join(self.pinned_for(slot) or ()) or "void"
            environment.update(dict.fromkeys(TEMPLATED_KEYS, pinned))
        return environment


@dataclass(frozen=True)
class SwarmStack:
    """A rendered stack file and what drgpu expects of it once deployed."""

    project: str
    text: str
    services: tuple[SwarmService, ...]
    warnings: tuple[str, ...]
    layout: SwarmLayout = ONE_NODE
    sharing: Sharing = Sharing.EXCLUSIVE
    secret_text: str | None = None

    @property
    def shown_text(self) -> str:
        """The stack file as drgpu may print it: secret values masked."""
        return self.text if self.secret_text is None else self.secret_text
