"""The cost ledger a watch keeps (`core.cost`): `.drgpu/cost.json` beside the settings file
(state_files), saved every SAVE_S seconds and when the watch ends."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from drgpu.core.cost import Ledger, Usage, charge, energies, from_json, to_json
from drgpu.core.gpu_usage import Status
from drgpu.core.model import HEADER_MARK, GpuHealth
from drgpu.core.swarm_view import may_run
from drgpu.errors import ConfigError
from drgpu.host.files import Bound, read_text_bounded
from drgpu.host.state_files import state_dir, write_owned_file

NAME = "cost.json"
SAVE_S = 30.0


def ledger_path(env_file: Path) -> Path:
    """Where the ledger of the runs of these settings lives."""
    return state_dir(env_file, create=False) / NAME


def read_ledger(path: Path) -> dict[tuple[str, str, str], Usage]:
    """The ledger at `path` (empty when there is none); a ConfigError when it is not one."""
    if not path.exists():
        return {}
    text = read_text_bounded(path, Bound.INVENTORY, "cost file", follow_links=False)
    try:
        return from_json(json.loads(text.partition("\n")[2]))
    except ValueError:
        raise ConfigError(f"{path} is not drgpu's cost file", hint="move it away") from None


class CostKeeper:
    """A watch's ledger: each refresh charged (a longer gap than three intervals counts as
    three), saved now and then; a failed save is `report`ed."""

    def __init__(self, path: Path | None, interval_s: float, report: Callable[[str], None]):
        self._path = path
        self.ledger: Ledger = read_ledger(path) if path else {}
        self._energy: dict[str, int] = {}
        self._last: float | None = None
        self._saved = time.monotonic()
        self._longest = 3 * max(interval_s, 0.1)
        self._report = report
        self._said_elsewhere = False

    def charge(self, status: Status, health: Sequence[GpuHealth]) -> None:
        """Charge one refresh (this node's GPUs: what runs on other nodes is said once)."""
        if (swarm := status.swarm) and not self._said_elsewhere:
            elsewhere = [t for t in swarm.tasks if t.node_id != swarm.here and may_run(t)]
            if elsewhere:
                self._said_elsewhere = True
                self._report(
                    f"GPU cost counts this node's GPUs: {len(elsewhere)} task(s) on other"
                    " nodes are not in `drgpu report` (a watch on each node keeps its own)"
                )
        now = time.monotonic()
        seconds = 0.0 if self._last is None else min(now - self._last, self._longest)
        self.ledger = charge(self.ledger, status, health, self._energy, seconds, time.time())
        self._energy, self._last = energies(health), now
        if now - self._saved >= SAVE_S:
            self.save()

    def save(self) -> None:
        """Replace the ledger file atomically (when there is a ledger to keep)."""
        self._saved = time.monotonic()
        if self._path is not None and self.ledger:
            body = json.dumps(to_json(self.ledger), indent=1)
            head = f"{HEADER_MARK}: GPU cost per run, service and worker"
            try:
                write_owned_file(self._path, f"{head}\n{body}\n")
            except ConfigError as exc:
                self._report(f"GPU cost not saved: {exc.message}")
