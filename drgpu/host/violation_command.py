"""`status --watch --on-violation CMD`: CMD run for each new violation, one at a time in a
thread of its own (docs/metrics.md), its failures reported while the watch goes on.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import shutil
import threading
from collections.abc import Callable, Sequence

from drgpu.core.alerts import Alert
from drgpu.errors import ConfigError, DrgpuError
from drgpu.host import docker_api, process

TIMEOUT_S = 30.0
WAIT_AT_END_S = 5.0  # how long the end of a watch waits for a CMD still running
QUEUED = 16  # alerts waiting for CMD beyond these are dropped (and reported)
OUTPUT_KEPT = 4096


def command_line(text: str) -> tuple[str, ...]:
    """CMD split as a shell splits words (ConfigError: empty, or its program not found)."""
    try:
        args = tuple(shlex.split(text))
    except ValueError as exc:
        raise ConfigError(f"--on-violation {text!r}: {exc}") from None
    if not args:
        raise ConfigError("--on-violation needs a command")
    if shutil.which(args[0]) is None:
        raise ConfigError(f"--on-violation: {args[0]}: command not found (or not executable)")
    return args


class ViolationCommand:
    """Runs CMD for each alert handed to `run`, one at a time, failures told to `report`."""

    def __init__(self, args: Sequence[str], report: Callable[[str], None]) -> None:
        self._args = tuple(args)
        self._report = report
        self._queue: queue.Queue[Alert | None] = queue.Queue(QUEUED)
        self._worker = threading.Thread(target=self._work, name="on-violation", daemon=True)
        self._worker.start()

    def run(self, alert: Alert) -> None:
        """Run CMD for this alert soon (dropped, and reported, when too many wait)."""
        try:
            self._queue.put_nowait(alert)
        except queue.Full:
            message = alert.violation.message
            self._report(f"--on-violation: {QUEUED} runs already wait; not run for: {message}")

    def close(self) -> None:
        """No more alerts: wait (a little) for those handed over."""
        try:
            self._queue.put(None, timeout=WAIT_AT_END_S)
        except queue.Full:
            return
        self._worker.join(timeout=WAIT_AT_END_S)

    def _work(self) -> None:
        while (alert := self._queue.get()) is not None:
            variables = {k: v.replace("\0", "\\x00") for k, v in alert.environment().items()}
            try:
                done = process.run_tail(
                    self._args,
                    env=docker_api.program_environment({**os.environ, **variables}),
                    timeout=TIMEOUT_S,
                    stdin=json.dumps(alert.document()) + "\n",
                    keep=OUTPUT_KEPT,
                )
            except DrgpuError as exc:
                self._report(f"--on-violation: {exc.message}")
                continue
            if not done.ok:
                why = f"{self._args[0]} exited {done.returncode}: {done.last_error_line()}"
                self._report(f"--on-violation: {why}")
