"""What each run cost in GPU time and energy, per service and worker (container), as a watch
sees it (`drgpu report` shows it; docs/metrics.md says what is charged). Pure: the ledger and
one refresh in, a new ledger out; it keeps the `MAX_RUNS` runs seen last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from drgpu.core import metrics
from drgpu.core.faults import throttled
from drgpu.core.gpu_usage import Status
from drgpu.core.metrics import Sample
from drgpu.core.model import GpuHealth

MAX_RUNS = 200
Key = tuple[str, str, str]  # run, service, container (the worker)


@dataclass(frozen=True)
class Usage:
    """One worker's account, or a sum of them."""

    gpu_seconds: float = 0.0
    energy_j: float = 0.0
    peak_memory_mib: int = 0
    busy_seconds: float = 0.0  # utilisation x seconds (a GPU at 50 % for 2 s: 1)
    throttled_seconds: float = 0.0
    first_seen: float = 0.0  # seconds since the epoch
    last_seen: float = 0.0
    measured_seconds: float = 0.0  # the GPU-seconds whose utilisation NVML read

    @property
    def mean_utilization(self) -> float | None:
        """Mean GPU utilisation (0-100) over its measured GPU-seconds (None: never measured)."""
        return 100 * self.busy_seconds / self.measured_seconds if self.measured_seconds else None

    def plus(self, other: Usage) -> Usage:
        """Two accounts together (peaks: the larger; times: the span of both)."""
        return Usage(
            self.gpu_seconds + other.gpu_seconds,
            self.energy_j + other.energy_j,
            max(self.peak_memory_mib, other.peak_memory_mib),
            self.busy_seconds + other.busy_seconds,
            self.throttled_seconds + other.throttled_seconds,
            min(self.first_seen or other.first_seen, other.first_seen or self.first_seen),
            max(self.last_seen, other.last_seen),
            self.measured_seconds + other.measured_seconds,
        )


Ledger = Mapping[Key, Usage]


def charge(
    ledger: Ledger,
    status: Status,
    health: Sequence[GpuHealth],
    energy_before: Mapping[str, int],
    seconds: float,
    now: float,
) -> dict[Key, Usage]:
    """The ledger with one refresh charged (`seconds` since the one before): each holder of a
    GPU its even share of the energy counter's rise, its processes' peak memory (an rl_coach
    with its trainer's), and the seconds, busy and held down."""
    found = dict(ledger)
    by_index = {h.index: h for h in health}
    memory: dict[Key, int] = {}
    coaches = {
        (h.run_id, h.service): h.container
        for hs in status.holders.values()
        for h in hs
        if h.forwarded
    }
    for p in status.processes:
        if p.run_id is not None and p.container:
            # A SageMaker trainer's (service `rl_coach/<its container>`) is its rl_coach's.
            service, _, trainer = (p.service or p.container).partition("/")
            container = coaches.get((p.run_id, service), p.container) if trainer else p.container
            key = (p.run_id, service, container)
            memory[key] = memory.get(key, 0) + p.used_memory_mib
    for gpu in status.inventory.gpus:
        holders = {(h.run_id, h.service, h.container) for h in status.holders.get(gpu.index, ())}
        gpu_health = by_index.get(gpu.index, GpuHealth(gpu.index, gpu.uuid))
        now_mj, before_mj = gpu_health.energy_mj, energy_before.get(gpu.uuid)
        joules = (now_mj - before_mj) / 1000 if now_mj and before_mj and now_mj > before_mj else 0
        busy = (gpu.utilization_gpu_percent or 0) * seconds / 100
        measured = 0 if gpu.utilization_gpu_percent is None else seconds
        held = seconds * throttled(gpu_health)
        for key in holders:
            share = joules / len(holders)
            charged = Usage(seconds, share, memory.get(key, 0), busy, held, 0, now, measured)
            found[key] = (found.get(key) or Usage(first_seen=now)).plus(charged)
    last: dict[str, float] = {}
    for (run, _, _), usage in found.items():
        last[run] = max(last.get(run, 0.0), usage.last_seen)
    if len(last) <= MAX_RUNS:
        return found
    kept = set(sorted(last, key=last.__getitem__)[-MAX_RUNS:])
    return {key: usage for key, usage in found.items() if key[0] in kept}


def energies(health: Sequence[GpuHealth]) -> dict[str, int]:
    """Each GPU's energy counter by UUID (where NVML has one), for the next `charge`."""
    return {h.uuid: h.energy_mj for h in health if h.energy_mj is not None}


def to_json(ledger: Ledger) -> list[dict[str, Any]]:
    """The ledger as the file (and `report --json`) keeps it: one entry per worker."""
    return [
        {"run": run, "service": service, "container": container, **usage_json(usage)}
        for (run, service, container), usage in sorted(ledger.items())
    ]


def usage_json(usage: Usage) -> dict[str, Any]:
    """An account's JSON: its fields and its mean utilisation."""
    return {**asdict(usage), "mean_utilization": usage.mean_utilization}


def from_json(document: Any) -> dict[Key, Usage]:
    """A ledger from `to_json`'s list; an entry that does not fit is left out."""
    found = {}
    fields = set(Usage.__dataclass_fields__)
    for entry in document if isinstance(document, list) else []:
        try:
            key = (str(entry["run"]), str(entry["service"]), str(entry["container"]))
            found[key] = Usage(**{k: v for k, v in entry.items() if k in fields})
        except (KeyError, TypeError):
            continue
    return found


def by_service(ledger: Ledger, run: str) -> dict[str, Usage]:
    """One run's accounts per service (its workers together)."""
    found: dict[str, Usage] = {}
    for (run_id, service, _), usage in sorted(ledger.items()):
        if run_id == run:
            found[service] = found[service].plus(usage) if service in found else usage
    return found


def samples(ledger: Ledger) -> list[Sample]:
    """The cost series, per run, service and worker (tags `run`, `service`, `container`)."""
    found = []
    for (run, service, container), u in sorted(ledger.items()):
        labels = (("run", run), ("service", service), ("container", container))
        for metric, value in (
            (metrics.GPU_SECONDS, u.gpu_seconds),
            (metrics.ENERGY, u.energy_j),
            (metrics.PEAK_MEMORY, u.peak_memory_mib * metrics.MIB),
            (metrics.MEAN_UTILIZATION, u.mean_utilization),
            (metrics.THROTTLED, u.throttled_seconds),
        ):
            if value is not None:
                found.append(Sample(metric, labels, float(value)))
    return found
