"""The two ways the tests run drgpu: in this process through its own `main` (quick, no
Docker, no NVML), and in a child process as its users run it (`python -m drgpu`).

Every test runs drgpu through one of these: `run_main` (or the `cli` fixture of
tests/conftest.py, which is `run_main` in a fresh working directory) and
`run_drgpu` / `start_drgpu`.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, NamedTuple

from drgpu.cli import main

# `drgpu` as a child process runs it: this interpreter, so this checkout's drgpu.
DRGPU_ARGV = (sys.executable, "-m", "drgpu")
# The same, as a shell command line (for scripts run in a terminal).
DRGPU_COMMAND = shlex.join(DRGPU_ARGV)


class Result(NamedTuple):
    """How one in-process drgpu command ended (`code, out, err = run_main(...)`)."""

    code: int
    out: str
    err: str


Cli = Callable[..., Result]


def run_main(*args: str | Path) -> Result:
    """`drgpu ARGS` through drgpu's own main in this process, stdout and stderr captured.

    main always ends in SystemExit; its code is the exit status (a non-int one counts as 1).
    """
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(arg) for arg in args])
        except SystemExit as exc:
            code = exc.code
        else:
            raise AssertionError(f"drgpu's main returned instead of exiting: {args}")
    return Result(code if isinstance(code, int) else 1, out.getvalue(), err.getvalue())


def start_drgpu(
    *args: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    stdin: int | None = None,
    **popen: Any,
) -> subprocess.Popen[str]:
    """`drgpu ARGS` in a child process, not waited for; its stdout and stderr are text
    pipes. `env` is the whole environment (None: this one); `popen`: more Popen options
    (user, group, ...). The signals drgpu catches start at their defaults, as in a terminal:
    a test run started with nohup or `&` ignores SIGHUP or SIGINT, and drgpu leaves a signal
    it was started ignoring ignored."""
    return subprocess.Popen(
        [*DRGPU_ARGV, *(os.fspath(arg) for arg in args)],
        env=env,
        cwd=cwd,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_signals_at_their_defaults,  # noqa: PLW1509 (three calls, no threads)
        **popen,
    )


def _signals_at_their_defaults() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def run_drgpu(
    *args: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """`start_drgpu`, waited for: its exit status and output (`input` fed to its stdin);
    killed, and TimeoutExpired raised, after `timeout` seconds."""
    stdin = subprocess.PIPE if input is not None else None
    with start_drgpu(*args, env=env, cwd=cwd, stdin=stdin) as process:
        try:
            out, err = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def read_until(stream: IO[str] | None, text: str, timeout: float = 60) -> str:
    """What `stream` (a started drgpu's stderr) has said once it says `text`: a wait with a
    deadline (AssertionError after `timeout` s, or at its end). Read from the pipe itself,
    so that `communicate()` afterwards gets exactly the rest."""
    assert stream is not None
    chunks: list[bytes] = []
    done = threading.Event()

    def read() -> None:
        while text.encode() not in b"".join(chunks) and (chunk := os.read(stream.fileno(), 4096)):
            chunks.append(chunk)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    done.wait(timeout)
    said = b"".join(chunks).decode(errors="replace")
    assert text in said, f"never said {text!r}: {said}"
    return said
