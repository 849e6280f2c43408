"""The one place drgpu runs other programs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from drgpu.core.numbers import whole_seconds
from drgpu.errors import ConfigError, DockerError
from drgpu.host import trace
from drgpu.host.signals import shielded

# How long a program drgpu stops (on a signal or a timeout) may take to exit before it is killed.
STOP_GRACE_S = 10
# How long any program may run when its call names no limit of its own (Compose's `up`,
# DRfC's start script, which may pull images): DRGPU_COMMAND_TIMEOUT in the environment.
DEFAULT_TIMEOUT_S = 1800
TIMEOUT_KEY = "DRGPU_COMMAND_TIMEOUT"
MAX_TIMEOUT_S = 7 * 86400


@dataclass(frozen=True)
class Completed:
    """What a finished program left behind."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        """Whether it exited 0."""
        return self.returncode == 0

    def last_error_line(self) -> str:
        """The last non-empty line of stderr (or stdout), for one-line messages."""
        for text in (self.stderr, self.stdout):
            if text.strip():
                return text.strip().splitlines()[-1].strip()
        return f"exit status {self.returncode}"


def run(
    args: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float | None = None
) -> Completed:
    """Run a program to its end and capture its output, as `stream` does."""
    return stream(args, env=env, on_line=lambda line: line, timeout=timeout)


def default_timeout() -> float:
    """The limit of a call that names none: DRGPU_COMMAND_TIMEOUT seconds, else 30 min."""
    text = os.environ.get(TIMEOUT_KEY, "").strip()
    return whole_seconds(TIMEOUT_KEY, text, 1, MAX_TIMEOUT_S) if text else DEFAULT_TIMEOUT_S


def _timed_out(args: Sequence[str], limit: float, *, named: bool) -> DockerError:
    """The error of a program stopped at its time limit (it and its process group)."""
    hint = f"set {TIMEOUT_KEY} (seconds) in the environment for a longer limit"
    stopped = f"{' '.join(args[:3])} did not finish in {limit:.0f}s: stopped"
    return DockerError(stopped, hint=hint if named else None)


def _log(args: Sequence[str], what: str, started: float | None = None) -> None:
    """DRGPU_LOG: `what` of a program (and its duration since `started`), with its argv as a
    shell would take it (its argv only: its environment may hold secrets that no mask knows)."""
    if trace.enabled():
        import shlex  # only when DRGPU_LOG shows the line

        took = "" if started is None else f" in {(time.monotonic() - started) * 1000:.3f} ms"
        trace.info(__name__, "%s%s: %s", what, took, shlex.join(args))


def _started(
    args: Sequence[str], env: Mapping[str, str] | None, *, stdin: bool
) -> subprocess.Popen[str]:
    """The program started in a session of its own, killed when drgpu dies; one that
    cannot start is an error."""
    _log(args, "run")
    try:
        return subprocess.Popen(
            list(args),
            env=dict(env) if env is not None else None,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",  # a program's output is talk: a stray byte is no error
            start_new_session=True,
            preexec_fn=_die_with_parent(),  # noqa: PLW1509 (one prctl call, no Python work)
        )
    except FileNotFoundError:
        raise DockerError(f"{args[0]}: command not found") from None
    except PermissionError:
        raise ConfigError(f"{args[0]}: not executable (permission denied)") from None
    except OSError as exc:
        raise DockerError(f"cannot run {args[0]}: {exc.strerror or exc}") from None


def _stop(child: subprocess.Popen[str]) -> None:
    """SIGTERM to the program's process group (a script's children too), a grace period,
    then SIGKILL; reaped either way (its pipes are left to whoever reads them)."""
    with shielded(lambda name: None):
        for signum, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, None)):
            try:
                os.killpg(child.pid, signum)
            except ProcessLookupError:  # the whole group has ended
                pass
            except PermissionError:  # a member runs as another user: the leader at least
                if child.poll() is None:
                    child.send_signal(signum)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=wait_s)


def _die_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook asking Linux to SIGKILL the child when drgpu dies; None elsewhere.

    With a pre-exec hook the child runs Python's after-fork handlers: no thread may import
    a module that registers one (`logging` does) while a program starts."""
    import ctypes  # lazy: only the Linux parent-death hook needs it

    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return partial(prctl, 1, int(signal.SIGKILL), 0, 0, 0)  # 1: PR_SET_PDEATHSIG


def stream(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    on_line: Callable[[str], str | None],
    timeout: float | None = None,
) -> Completed:
    """Run a program to its end, handing each stderr line to `on_line` as it comes (the
    captured stderr: what it returns, None dropped). In a session of its own, so that a
    Ctrl-C reaches drgpu alone, which stops it (SIGTERM, then SIGKILL), as `timeout` does;
    killed when drgpu is (a kill -9 leaves no program running on its own)."""
    limit = default_timeout() if timeout is None else timeout
    started = time.monotonic()
    child = _started(args, env, stdin=False)
    assert child.stdout is not None and child.stderr is not None
    stdout, kept = child.stdout, []
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(stdout.read()), daemon=True)
    reader.start()
    expired = threading.Event()

    def expire() -> None:  # at the limit: its stderr then ends, and so does the loop below
        expired.set()
        _stop(child)  # a timer thread: its `shielded` installs no handler

    timer = threading.Timer(limit, expire)
    timer.daemon = True
    timer.start()
    try:
        for line in child.stderr:
            keep = on_line(line.rstrip("\n"))
            if keep is not None:
                kept.append(keep + "\n")
        child.wait()
    except BaseException:
        timer.cancel()  # a signal (see drgpu.host.signals): stop the program first
        _stop(child)  # the reader thread still reads its stdout
        _log(args, "stopped: interrupted", started)
        raise
    timer.cancel()
    reader.join()
    if expired.is_set():
        _log(args, "stopped: timed out", started)
        raise _timed_out(args, limit, named=timeout is None)
    _log(args, f"exit {child.returncode}", started)
    return Completed(child.returncode, "".join(out), "".join(kept))


def run_tail(
    args: Sequence[str], *, env: Mapping[str, str], stdin: str, timeout: float, keep: int
) -> Completed:
    """Run a program as `run` does, keeping only the last `keep` bytes of its output (stdout
    and stderr, as `stderr`), until it exits: a child it left holding its output is not
    waited for. Its stdin gets what a pipe holds of `stdin`; at `timeout` it is stopped."""
    import select  # lazy: only --on-violation needs it

    started = time.monotonic()
    child = _started(args, env, stdin=True)
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    os.set_blocking(child.stdin.fileno(), False)
    with contextlib.suppress(OSError):  # a full pipe, or a program that closed it
        os.write(child.stdin.fileno(), stdin.encode())
    with contextlib.suppress(OSError):
        child.stdin.close()
    fds, tail = [child.stdout.fileno(), child.stderr.fileno()], b""
    try:
        while True:
            exited = child.poll() is not None
            if not exited and time.monotonic() - started > timeout:
                raise _timed_out(args, timeout, named=False)
            for fd in select.select(fds, [], [], 0 if exited else 0.1)[0]:
                chunk = os.read(fd, 65536)
                tail = (tail + chunk)[-keep:] if chunk else tail
                fds = fds if chunk else [f for f in fds if f != fd]
            if exited:  # what was written before it exited is read (no more: a child's)
                break
    except BaseException:
        _stop(child)
        _log(args, "stopped", started)
        raise
    finally:
        child.stdout.close()
        child.stderr.close()
    _log(args, f"exit {child.returncode}", started)
    return Completed(child.returncode, "", tail.decode("utf-8", "replace"))


@contextlib.contextmanager
def meanwhile(work: Callable[[], object]) -> Iterator[None]:
    """Run `work` in a thread while the block runs (e.g. an import while a step waits on
    the engine); the block ends when both are done. A failing block does not wait for
    `work` (a hung engine must not hold up an error, a Ctrl-C or a rollback)."""
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    yield
    thread.join()
