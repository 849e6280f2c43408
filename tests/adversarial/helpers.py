"""The adversarial suite's tools: drgpu's own main run in-process, and what every run must
satisfy (documented exit code, one clear error line, no traceback, no secret)."""

from __future__ import annotations

import contextlib
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings

from drgpu.cli import main

REPO = Path(__file__).resolve().parents[2]
GTX_M40 = REPO / "examples" / "inventories" / "gtx1650-m40.json"
# A value no generator produces by chance, for the secret settings of every case.
SECRET = "s3cr3t-9f8e7d6c5b4a"


def documented_exit_codes() -> set[int]:
    """The codes of the README's exit-code table."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme.split("### Exit codes", 1)[1].split("\n\n", 2)[1]
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


@dataclass(frozen=True)
class Ran:
    """How one in-process drgpu command ended."""

    code: int
    out: str
    err: str

    def assert_sound(self, *allowed: int) -> None:
        """A documented exit code among `allowed`; on failure exactly one error line (and
        at most one hint); never a traceback, never exit 1, never the secret."""
        assert self.code in allowed, (self.code, self.err)
        assert self.code in documented_exit_codes()
        assert "Traceback" not in self.err
        errors = [line for line in self.err.splitlines() if line.startswith("drgpu: error: ")]
        hints = [line for line in self.err.splitlines() if line.startswith("  hint: ")]
        assert len(errors) == (0 if self.code == 0 else 1), self.err
        assert len(hints) <= len(errors), self.err
        assert SECRET not in self.out + self.err


def run(*args: str | Path) -> Ran:
    """`drgpu ARGS` through drgpu's own main, its output captured."""
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(arg) for arg in args])
        except SystemExit as exc:
            code = exc.code
    return Ran(code if isinstance(code, int) else 1, out.getvalue(), err.getvalue())
