"""`drgpu status`: read NVML, the engine's containers and each GPU process's cgroup;
`core.gpu_usage` judges them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drgpu.core.gpu_usage import Status, build_status


def snapshot(session: Any, run_id: str | None = None) -> Status:
    """Read NVML (through an initialised session: a watch initialises it once), the engine's
    containers and each GPU process's cgroup, and judge them."""
    from drgpu.host import engine
    from drgpu.host.cgroups import read_cgroup
    from drgpu.host.nvml import inventory_from_nvml

    inventory = inventory_from_nvml(session)
    ours = engine.drgpu_containers()
    others = engine.running_containers_brief()
    trainers = engine.sagemaker_candidates() if _has_launcher(ours) else []
    pids = {proc.pid for gpu in inventory.gpus for proc in gpu.processes}
    cgroups = {pid: read_cgroup(pid) for pid in pids}
    return build_status(inventory, ours, others, cgroups, run_id, sagemaker=trainers)


def _has_launcher(containers: list[Any]) -> bool:
    """Whether any drgpu run has an rl_coach (only then are SageMaker trainers drgpu's)."""
    from drgpu.core import labels
    from drgpu.core.gpu_usage import LAUNCHER_ROLE

    return any(c.labels.get(labels.ROLE) == LAUNCHER_ROLE for c in containers)


def watch(
    session: Any,
    run_id: str | None,
    show: Callable[[Status], None],
    interval_s: float,
    count: int | None = None,
) -> Status | None:
    """Show a fresh snapshot every `interval_s` until `count` snapshots or Ctrl-C; the last
    snapshot (None when interrupted before the first)."""
    import time

    last = None
    shown = 0
    try:
        while count is None or shown < count:
            if shown:
                time.sleep(interval_s)
            last = snapshot(session, run_id)
            show(last)
            shown += 1
    except KeyboardInterrupt:
        pass
    return last
