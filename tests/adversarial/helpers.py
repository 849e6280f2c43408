"""The adversarial suite's tools: what every run of drgpu's own main (run in-process by
tests.support.runners.run_main) must satisfy: a documented exit code, one clear error
line, no traceback, no secret."""

from __future__ import annotations

import os
import re
from pathlib import Path

from hypothesis import HealthCheck, settings

from tests.support.runners import Result

REPO = Path(__file__).resolve().parents[2]
GTX_M40 = REPO / "tests" / "inventories" / "m40-first.json"
# A value no generator produces by chance, for the secret settings of every case.
SECRET = "s3cr3t-9f8e7d6c5b4a"


def documented_exit_codes() -> set[int]:
    """The codes of the exit-code table (docs/exit-codes.md)."""
    page = (REPO / "docs" / "exit-codes.md").read_text(encoding="utf-8")
    table = page.split("# Exit codes and logging", 1)[1].split("\n\n", 2)[1]
    return {int(found) for found in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)}


# Hypothesis' budget, as two profiles: a few seconds per property; in CI (CI=true) the
# examples are fixed (derandomized), so a run there is repeatable.
settings.register_profile(
    "drgpu-adversarial",
    max_examples=int(os.environ.get("DRGPU_ADVERSARIAL_EXAMPLES", "120")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    database=None,
)
settings.register_profile(
    "drgpu-adversarial-ci", settings.get_profile("drgpu-adversarial"), derandomize=True
)
PROFILE = (
    "drgpu-adversarial-ci" if os.environ.get("CI", "").lower() == "true" else "drgpu-adversarial"
)
PROPERTY = settings(settings.get_profile(PROFILE))


def assert_sound(ran: Result, *allowed: int) -> None:
    """A documented exit code among `allowed`; on failure exactly one error line (and at
    most one hint); never a traceback, never exit 1, never the secret."""
    assert ran.code in allowed, (ran.code, ran.err)
    assert ran.code in documented_exit_codes()
    assert "Traceback" not in ran.err
    errors = [line for line in ran.err.splitlines() if line.startswith("drgpu: error: ")]
    hints = [line for line in ran.err.splitlines() if line.startswith("  hint: ")]
    assert len(errors) == (0 if ran.code == 0 else 1), ran.err
    assert len(hints) <= len(errors), ran.err
    assert SECRET not in ran.out + ran.err
