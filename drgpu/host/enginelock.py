"""The engine-wide lock every `drgpu up` and `down` holds: a container `drgpu-lock` in the
engine, created and never started (the engine creates a name once), so every user of one
engine is serialized and nobody without access to it can plant or hold it. A killed holder's
lock is removed (by id: a lock someone else took meanwhile stays), and so is the run it was
starting. Its labels say who holds it (core.lock_holder)."""

from __future__ import annotations

import getpass
import os
import re
import signal
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from drgpu.core.lock_holder import Holder, Process, holder_from_labels, holder_labels, is_stale
from drgpu.errors import DockerError
from drgpu.host import docker_api
from drgpu.host.files import read_system
from drgpu.host.signals import shielded

TIMEOUT_KEY = "DRGPU_LOCK_TIMEOUT"
POLL_S = 0.25
LOCK_NAME = "drgpu-lock"
LOCK_IMAGE = "drgpu/lock:1"
_EMPTY_TAR = bytes(10240)  # an empty tar archive: the lock image has no files at all

SINCE_FORMAT = "%Y-%m-%d %H:%M:%SZ"  # Holder.since and Process.booted, compared as text
MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))


def this_process() -> Process:
    """This process, as the lock's labels name it."""
    return Process(
        pid=os.getpid(),
        start_ticks=start_ticks(os.getpid()) or 0,
        boot_id=_read(Path("/proc/sys/kernel/random/boot_id")),
        pid_namespace=_pid_namespace(),
        host=socket.gethostname(),
        machine_id=machine_id(),
        booted=booted(),
    )


def machine_id(files: tuple[Path, ...] = MACHINE_ID_FILES) -> str:
    """This machine's id (systemd's, else D-Bus's); "" when there is none (as in containers)."""
    return next((found for path in files if (found := _read(path))), "")


def booted(proc_stat: Path = Path("/proc/stat")) -> str:
    """When this boot began (the kernel's `btime`), as the lock writes times; "" when unknown."""
    found = re.search(r"^btime +(\d+)\s*$", read_system(proc_stat) or "", re.MULTILINE)
    if found is None:
        return ""
    return datetime.fromtimestamp(int(found[1]), timezone.utc).strftime(SINCE_FORMAT)


def start_ticks(pid: int) -> int | None:
    """When process `pid` started (clock ticks after boot), or None when there is none
    (a zombie, dead and not yet reaped, counts as none)."""
    stat = read_system(Path(f"/proc/{pid}/stat")) or ""  # none: no fields
    # The command name (field 2) may hold spaces and parentheses: count after the last ')'.
    fields = stat.rpartition(")")[2].split()
    try:
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (IndexError, ValueError):
        return None


def _read(path: Path) -> str:
    return (read_system(path) or "").strip()


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _user() -> str:
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = "?"
    sudo = os.environ.get("SUDO_USER")
    via = f" via sudo from {sudo}" if sudo and os.getuid() == 0 else ""
    return f"{name} (uid {os.getuid()}){via}"


def _create_lock(labels: Mapping[str, str]) -> str | None:
    """Create the lock object with `labels`: its id, or None when it exists already."""
    body = {
        "Image": LOCK_IMAGE,
        "Cmd": ["drgpu-lock"],
        "Labels": dict(labels),
        "NetworkDisabled": True,
        "HostConfig": {"NetworkMode": "none"},
    }
    path = f"/containers/create?name={LOCK_NAME}"
    with docker_api.connected() as engine:
        answer = engine.call("POST", path, body)
        if answer.status == 404:  # no lock image on this engine yet: import it (an empty image)
            repo, tag = LOCK_IMAGE.split(":")
            engine.call(
                "POST", f"/images/create?fromSrc=-&repo={repo}&tag={tag}", data=_EMPTY_TAR
            ).checked_body("import drgpu's lock image", 200)
            answer = engine.call("POST", path, body)
    return None if answer.status == 409 else answer.created_id("create drgpu's lock")


def _remove_lock(lock_id: str) -> None:
    """Remove the lock object `lock_id` (by id: never a lock someone else took since)."""
    answer = docker_api.call("DELETE", f"/containers/{lock_id}?force=1")
    answer.checked("remove drgpu's lock", 204, 404)


@contextmanager
def engine_lock(
    command: str,
    project: str,
    *,
    on_wait: Callable[[str], None],
    on_stale: Callable[[Holder], None],
    timeout_s: float,
    volumes_before: Callable[[], tuple[str, ...]],
) -> Iterator[Holder]:
    """Hold the engine's lock for `drgpu COMMAND PROJECT` until the block ends, the project's
    volumes (`volumes_before`, checked again once held) written on it for whoever finds this
    holder killed. A killed holder goes to `on_stale` before its lock is removed; `on_wait`
    hears once whom this one waits for; after `timeout_s` seconds a DockerError names them."""
    here = this_process()
    deadline = time.monotonic() + timeout_s
    told = False
    lock_id: str | None = None
    came: list[str] = []  # a signal while the lock is made: it comes once the lock is ours
    try:
        while lock_id is None:
            volumes = volumes_before()
            mine = Holder(
                process=here,
                user=_user(),
                command=command,
                project=project,
                since=datetime.now(timezone.utc).strftime(SINCE_FORMAT),
                volumes_before=volumes,
            )
            with shielded(came.append):  # made and noted together, never one alone
                lock_id = _create_lock(holder_labels(mine))
                if lock_id is not None and volumes_before() != volumes:
                    _remove_lock(lock_id)  # a volume came or went meanwhile: write it again
                    lock_id = None
            if came or lock_id is not None:
                break
            answer = docker_api.call("GET", f"/containers/{LOCK_NAME}/json")
            if answer.status == 404:
                continue  # released between the two calls
            found = answer.checked("read drgpu's lock", 200)
            other_id = str(found["Id"])
            holder = holder_from_labels((found.get("Config") or {}).get("Labels") or {})
            if holder is not None and is_stale(holder, here, start_ticks(holder.process.pid)):
                on_stale(holder)
                _remove_lock(other_id)
                continue
            who = holder.describe() if holder else f"an unknown holder (container {other_id[:12]})"
            if time.monotonic() >= deadline:
                raise DockerError(
                    f"gave up after {timeout_s:.0f}s waiting for {who}",
                    hint=(
                        f"if that process is gone, `docker rm {LOCK_NAME}` frees the lock;"
                        f" {TIMEOUT_KEY} sets how long drgpu waits"
                    ),
                )
            if not told:
                on_wait(f"waiting for {who} to finish")
                told = True
            time.sleep(POLL_S)
        if came:
            signal.raise_signal(signal.Signals[came[0]])  # now: the lock is removed below
        yield mine
    finally:  # a signal now must not leave a live run's lock to be taken for a killed one
        if lock_id is not None:
            with shielded(lambda name: None):
                _remove_lock(lock_id)
