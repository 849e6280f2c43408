"""`drgpu report`: what each run cost in GPU time and energy, per service and worker, from
the ledger `status --watch` keeps beside the settings (a run that ended included)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from drgpu.commands.options import resolved, run_id_of
from drgpu.core.cost import Ledger
from drgpu.core.inputs import InputOptions
from drgpu.core.settings import run_key
from drgpu.errors import ConfigError
from drgpu.host.cost_file import ledger_path, read_ledger


@dataclass(frozen=True)
class Report:
    """The ledger's accounts (of one run, when asked), and where it is kept."""

    path: Path
    ledger: Ledger


def report(env_file: Path | None, run_id: str | None, *, evaluation: bool) -> Report:
    """The accounts of `run_id` (every run: None; with `evaluation` the run's evaluation,
    DR_RUN_ID of the settings without it); a run never watched is an error (exit 2)."""
    target = resolved(InputOptions(env_file=env_file, evaluation=evaluation, needs_files=False))
    if evaluation:
        run_id = run_key(run_id or run_id_of(target), evaluation=True)
    path = ledger_path(target.env_file)
    mine = {key: usage for key, usage in read_ledger(path).items() if run_id in (None, key[0])}
    if run_id is not None and not mine:
        raise ConfigError(
            f"no GPU cost kept for run {run_id} in {path}",
            hint="`drgpu status --watch` keeps it while it watches the run",
        )
    return Report(path, mine)
