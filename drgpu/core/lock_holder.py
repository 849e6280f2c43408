"""Who holds drgpu's engine-wide lock, written as labels of the lock object, and whether
that holder is gone (a stale lock, left by a killed process)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from drgpu.core.numbers import is_digits

PREFIX = "drgpu.lock."
LOCK_LABEL = "drgpu.lock"
MARK_PREFIX = "drgpu.down."


@dataclass(frozen=True)
class Process:
    """A process told apart from every other: its pid and start (clock ticks after boot) in
    their boot and pid namespace; its machine id and boot's start (as `Holder.since` is
    written), "" when unknown; the host name is for people (two machines may share one)."""

    pid: int
    start_ticks: int
    boot_id: str
    pid_namespace: str
    host: str
    machine_id: str = ""
    booted: str = ""


@dataclass(frozen=True)
class Holder:
    """A drgpu command holding the lock: who runs it, what it does, and what it keeps."""

    process: Process
    user: str
    command: str
    project: str
    since: str
    volumes_before: tuple[str, ...] = ()

    def describe(self) -> str:
        """`drgpu up deepracer-0 (pid 42 of root on box, since 12:00:01Z)`."""
        return (
            f"drgpu {self.command} {self.project} (pid {self.process.pid} of {self.user}"
            f" on {self.process.host}, since {self.since})"
        )


def holder_labels(holder: Holder) -> dict[str, str]:
    """The labels of the lock object that `holder` creates: a label per field."""
    fields = {**vars(holder.process), **vars(holder)}
    fields["volumes_before"] = json.dumps(list(holder.volumes_before))
    del fields["process"]
    return {LOCK_LABEL: "1", **{f"{PREFIX}{key}": str(value) for key, value in fields.items()}}


def _label_number(text: str) -> int:
    """A label's whole number: ASCII digits only (`int` would take `٣`), else ValueError."""
    if not is_digits(text) or len(text) > 20:
        raise ValueError(text)
    return int(text)


def holder_from_labels(labels: Mapping[str, str]) -> Holder | None:
    """The holder the labels of a lock object name, or None when they name none (a lock
    object drgpu did not create, or one written by another version)."""
    try:
        volumes = json.loads(labels.get(f"{PREFIX}volumes_before", "[]"))
        process = Process(
            pid=_label_number(labels[f"{PREFIX}pid"]),
            start_ticks=_label_number(labels[f"{PREFIX}start_ticks"]),
            boot_id=labels[f"{PREFIX}boot_id"],
            pid_namespace=labels[f"{PREFIX}pid_namespace"],
            host=labels[f"{PREFIX}host"],
            machine_id=labels.get(f"{PREFIX}machine_id", ""),
            booted=labels.get(f"{PREFIX}booted", ""),
        )
        if not isinstance(volumes, list) or not all(isinstance(v, str) for v in volumes):
            return None
        return Holder(
            process=process,
            user=labels[f"{PREFIX}user"],
            command=labels[f"{PREFIX}command"],
            project=labels[f"{PREFIX}project"],
            since=labels[f"{PREFIX}since"],
            volumes_before=tuple(volumes),
        )
    except (KeyError, ValueError):
        return None


def is_stale(holder: Holder, here: Process, start_ticks_now: int | None) -> bool:
    """Whether `holder` is gone (docs/limits.md): in this boot and pid namespace, when the
    process now holding its pid started (`start_ticks_now`, None: none) tells; else only a
    lock this machine id took in another boot, before this boot began, is (never where a
    machine id or this boot's start is unknown)."""
    theirs = holder.process
    if (theirs.boot_id, theirs.pid_namespace) == (here.boot_id, here.pid_namespace):
        return start_ticks_now != theirs.start_ticks
    return (
        bool(theirs.machine_id)
        and theirs.machine_id == here.machine_id
        and theirs.boot_id != here.boot_id
        and bool(here.booted)
        and bool(holder.since)
        and holder.since < here.booted
    )


# --- the marks `drgpu down` leaves: a later `down` wins over an earlier `up` --------------


def down_marks(marks: Mapping[str, str], project: str, down: Process) -> dict[str, str]:
    """The marks with `down`'s for `project`; marks of an earlier boot are dropped."""
    kept = {key: text for key, text in marks.items() if text.startswith(f"{down.boot_id} ")}
    return {**kept, f"{MARK_PREFIX}{project}": f"{down.boot_id} {down.start_ticks} {down.pid}"}


def superseded(marks: Mapping[str, str], project: str, up: Process) -> bool:
    """Whether the last `down` of `project` (its mark) began after this `up` did, in this
    boot: start times in clock ticks, then pids for two started in one tick."""
    try:
        boot_id, ticks, pid = marks[f"{MARK_PREFIX}{project}"].split()
        down = (_label_number(ticks), _label_number(pid))
    except (KeyError, ValueError):
        return False
    return boot_id == up.boot_id and down > (up.start_ticks, up.pid)
