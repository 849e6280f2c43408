"""The host-wide lock `drgpu up` holds from reading what other runs hold to starting its
own stack, so that two runs started at the same moment never take the same GPU."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from drgpu.errors import ConfigError

LOCK_KEY = "DRGPU_LOCK_FILE"


def lock_path(settings: Mapping[str, str]) -> Path:
    """DRGPU_LOCK_FILE (system.env, else the environment), else `drgpu.lock` in
    $XDG_RUNTIME_DIR, else /tmp/drgpu-<uid>.lock."""
    chosen = settings.get(LOCK_KEY) or os.environ.get(LOCK_KEY)
    if chosen:
        return Path(chosen).expanduser()
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "drgpu.lock"
    return Path(tempfile.gettempdir()) / f"drgpu-{os.getuid()}.lock"


@contextmanager
def host_lock(path: Path, on_wait: Callable[[str], None]) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created when missing, never through a symlink);
    `on_wait` is told once when another process holds it and this one waits."""
    try:
        handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise ConfigError(
            f"cannot open the lock file {path}: {exc.strerror or exc}",
            hint=f"set {LOCK_KEY} to a file every drgpu user of this host can write",
        ) from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait(f"waiting for another drgpu up to finish (lock {path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)
