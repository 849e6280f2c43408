"""The `drgpu.*` labels of every container drgpu starts, and the claims read back from them:
the only record of what each run holds, so nothing goes stale when a stack is changed by hand."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from drgpu.core.model import Claim, Role
from drgpu.core.modes import Sharing

if TYPE_CHECKING:
    from drgpu.core.facts import ContainerFacts

GPUS = "drgpu.gpus"
FORWARDED_GPUS = "drgpu.forwarded_gpus"
ROLE = "drgpu.role"
RUN_ID = "drgpu.run_id"
SHARING = "drgpu.sharing"
SERVICE = "com.docker.compose.service"
# Swarm: how many GPUs a task has, each replica's pinned GPUs ("1=GPU-a;2=GPU-b"), and
# the engine's own labels and variable for what it gave a task.
SWARM_GPUS = "drgpu.swarm_gpus"
GPUS_BY_SLOT = "drgpu.gpus_by_slot"
SWARM_SERVICE = "com.docker.swarm.service.name"
SWARM_STACK = "com.docker.stack.namespace"  # also on a stack's containers
SWARM_TASK_NAME = "com.docker.swarm.task.name"
SWARM_NODE_ID = "com.docker.swarm.node.id"
SWARM_RESOURCE_VARIABLE = "DOCKER_RESOURCE_NVIDIA-GPU"
_GONE = ("exited", "dead", "removing")


def run_labels(
    run_id: str, sharing: Sharing, role: Role, gpus: str, *, forwarded: str = ""
) -> tuple[tuple[str, str], ...]:
    """The labels of one service: its GPUs (and, for rl_coach, the trainer's), role, run
    and, when not exclusive, how it shares them."""
    labels = [(GPUS, gpus), (ROLE, role.value), (RUN_ID, run_id)]
    if forwarded:
        labels.insert(0, (FORWARDED_GPUS, forwarded))
    if sharing != Sharing.EXCLUSIVE:
        labels.append((SHARING, str(sharing)))
    return tuple(labels)


def claims(containers: Iterable[tuple[str, Mapping[str, str]]]) -> tuple[Claim, ...]:
    """What each live container (state, labels) holds; stopped containers hold nothing."""
    return tuple(
        Claim(
            run_id=labels[RUN_ID],
            service=labels.get(SERVICE) or labels.get(SWARM_SERVICE, "?"),
            uuids=uuids,
            sharing=labels.get(SHARING, "exclusive"),
        )
        for state, labels in containers
        if state not in _GONE and RUN_ID in labels
        if (uuids := split_list(labels.get(GPUS)) + split_list(labels.get(FORWARDED_GPUS)))
    )


def given_gpus(container: ContainerFacts) -> tuple[str, ...]:
    """The GPU (or MIG) UUIDs drgpu gave a container itself: its `drgpu.gpus`; a Swarm replica's
    slot entry (task name `<service>.<slot>.<id>`); or what the engine gave a reserving task."""
    labels = container.labels
    if by_slot := labels.get(GPUS_BY_SLOT):
        slot = labels.get(SWARM_TASK_NAME, "").split(".")[-2:-1]
        for entry in by_slot.split(";"):
            number, _, uuids = entry.partition("=")
            if [number] == slot:
                return split_list(uuids)
        return ()
    if engine_chosen(labels):
        return split_list(container.environment.get(SWARM_RESOURCE_VARIABLE))
    return split_list(labels.get(GPUS))


def worker_of(container: ContainerFacts) -> str | None:
    """The simulator a worker `<simulator>-N` (role label `simulator`) is a copy of, else None."""
    name, _, slot = container.service.rpartition("-")
    worker = container.labels.get(ROLE) == Role.SIMULATOR.value and slot.isdigit()
    return name if worker and name else None


def engine_chosen(labels: Mapping[str, str]) -> bool:
    """Whether the Swarm engine chose a container's GPUs (a task reserving generic
    resources): its labels do not name them, its `DOCKER_RESOURCE_NVIDIA-GPU` does."""
    return labels.get(SWARM_GPUS, "0") != "0" and not labels.get(GPUS)


def with_engine_choice(container: ContainerFacts) -> dict[str, str]:
    """The labels of a task the engine chose GPUs for, naming them in `drgpu.gpus` for planning."""
    return {**container.labels, GPUS: ",".join(given_gpus(container))}


def split_list(text: str | None) -> tuple[str, ...]:
    """The non-empty items of a comma-separated list, stripped."""
    return tuple(part.strip() for part in (text or "").split(",") if part.strip())
