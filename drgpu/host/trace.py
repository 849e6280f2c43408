"""DRGPU_LOG (docs/exit-codes.md) on the `sys.stderr` of the moment (which masks secrets).
Off, it is free: `logging` (slow to import, and with after-fork handlers that `process` must
not race) is imported only when it is on."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from drgpu.errors import ConfigError

LEVELS = {"debug": 10, "info": 20}  # logging.DEBUG, logging.INFO
_on = False


def configure(environment: Mapping[str, str]) -> None:
    """Turn logging on as DRGPU_LOG says (`debug`, `info`; unset or empty: off)."""
    global _on  # noqa: PLW0603 (one switch for the whole process)
    _on = False
    wanted = environment.get("DRGPU_LOG", "").strip().lower()
    if not wanted:
        return
    if wanted not in LEVELS:
        raise ConfigError(
            f"DRGPU_LOG={wanted[:20]!r} is not a log level",
            hint=f"use one of: {', '.join(LEVELS)} (or leave it unset)",
        )
    import logging  # lazy: logging is imported only when DRGPU_LOG is set

    class ToStderr(logging.Handler):
        """Writes to the stderr of the moment (the redacting one, under `cli.main`)."""

        def emit(self, record: logging.LogRecord) -> None:
            try:
                sys.stderr.write(self.format(record) + "\n")
            except Exception:
                self.handleError(record)

    handler = ToStderr()
    handler.setFormatter(logging.Formatter("drgpu %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("drgpu")
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[wanted])
    root.propagate = False
    _on = True


def enabled() -> bool:
    """Whether DRGPU_LOG turned logging on."""
    return _on


def debug(logger: str, message: str, *args: Any) -> None:
    """Log `message % args` at DEBUG on `logger` (a module's __name__), when it is on."""
    _log(logger, LEVELS["debug"], message, args)


def info(logger: str, message: str, *args: Any) -> None:
    """Log `message % args` at INFO on `logger` (a module's __name__), when it is on."""
    _log(logger, LEVELS["info"], message, args)


def _log(logger: str, level: int, message: str, args: tuple[Any, ...]) -> None:
    if _on:
        import logging  # lazy: logging is imported only when DRGPU_LOG is set

        logging.getLogger(logger).log(level, message, *args)
