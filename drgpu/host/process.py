"""The one place drgpu runs other programs."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from drgpu.errors import DockerError


@dataclass(frozen=True)
class Completed:
    """What a finished program left behind."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        """Whether it exited 0."""
        return self.returncode == 0

    def last_error_line(self) -> str:
        """The last non-empty line of stderr (or stdout), for one-line messages."""
        for stream in (self.stderr, self.stdout):
            lines = [line.strip() for line in stream.splitlines() if line.strip()]
            if lines:
                return lines[-1]
        return f"exit status {self.returncode}"


def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    stdin: str | None = None,
) -> Completed:
    """Run a program to its end and capture its output; a missing program is a DockerError."""
    try:
        done = subprocess.run(
            list(args),
            env=dict(env) if env is not None else None,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise DockerError(f"{args[0]}: command not found") from None
    except subprocess.TimeoutExpired:
        raise DockerError(f"{' '.join(args[:3])} did not finish in {timeout:.0f}s") from None
    return Completed(tuple(args), done.returncode, done.stdout, done.stderr)
