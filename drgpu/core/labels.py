"""The `drgpu.*` labels of every container drgpu starts, and the claims read back from them.

The labels of running containers are the source of truth for what each run holds:
nothing is stored anywhere else, so nothing goes stale when a stack is changed by hand.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from drgpu.core.model import Claim, Role

GPUS = "drgpu.gpus"
FORWARDED_GPUS = "drgpu.forwarded_gpus"
ROLE = "drgpu.role"
RUN_ID = "drgpu.run_id"
SHARING = "drgpu.sharing"
SERVICE = "com.docker.compose.service"
_GONE = ("exited", "dead", "removing")


def run_labels(
    run_id: str, sharing: str, role: Role, gpus: str, *, forwarded: str = ""
) -> tuple[tuple[str, str], ...]:
    """The labels of one service: its GPUs (and, for rl_coach, the trainer's), role, run
    and, when not exclusive, how it shares them."""
    labels = [(GPUS, gpus), (ROLE, role.value), (RUN_ID, run_id)]
    if forwarded:
        labels.insert(0, (FORWARDED_GPUS, forwarded))
    if sharing != "exclusive":
        labels.append((SHARING, sharing))
    return tuple(labels)


def claims(containers: Iterable[tuple[str, Mapping[str, str]]]) -> tuple[Claim, ...]:
    """What each live container (state, labels) holds; stopped containers hold nothing."""
    found = []
    for state, labels in containers:
        if state in _GONE or RUN_ID not in labels:
            continue
        uuids = tuple(
            uuid
            for key in (GPUS, FORWARDED_GPUS)
            for uuid in labels.get(key, "").split(",")
            if uuid.strip()
        )
        if uuids:
            found.append(
                Claim(
                    run_id=labels[RUN_ID],
                    service=labels.get(SERVICE, "?"),
                    uuids=uuids,
                    sharing=labels.get(SHARING, "exclusive"),
                )
            )
    return tuple(found)
