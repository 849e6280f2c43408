"""No secret in any output: the values of secret settings, once read, and the shell's
secrets are masked on stdout and stderr."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TextIO

_hidden: list[str] = []


def hide(secrets: Iterable[str]) -> None:
    """Never print these values again (the values of secret settings, once read)."""
    _hidden.extend(secret for secret in secrets if secret not in _hidden)
    _hidden.sort(key=len, reverse=True)


class _Redacting(io.TextIOBase):
    """A text stream that masks every hidden value on its way to `stream`."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self._stream = stream

    def write(self, text: str) -> int:
        if _hidden:
            from drgpu.core.redaction import redact  # lazy: start-up time: only once one is hidden

            self._stream.write(redact(text, _hidden))
        else:
            self._stream.write(text)
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding


@contextmanager
def redacting_output(environment: Mapping[str, str]) -> Iterator[None]:
    """Within the block, stdout and stderr mask every value passed to `hide`, and the secrets
    of the `environment` drgpu runs in (settings or not: `MY_API_TOKEN`, a URL's password)."""
    from drgpu.core.redaction import secret_values  # lazy: start-up time

    hide(secret_values(environment))
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Redacting(stdout), _Redacting(stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = stdout, stderr
        _hidden.clear()
