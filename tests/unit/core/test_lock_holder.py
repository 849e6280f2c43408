"""drgpu/core/lock_holder.py: the lock's holder and staleness, and the mark a `down`
leaves."""

from __future__ import annotations

from dataclasses import replace

import pytest

from drgpu.core.lock_holder import (
    Holder,
    Process,
    down_marks,
    holder_from_labels,
    holder_labels,
    is_stale,
    superseded,
)

HERE = Process(pid=100, start_ticks=5000, boot_id="boot-a", pid_namespace="pid:[1]", host="box")
HOLDER = Holder(
    process=Process(
        pid=42, start_ticks=4000, boot_id="boot-a", pid_namespace="pid:[1]", host="box"
    ),
    user="root (uid 0)",
    command="up",
    project="deepracer-0",
    since="2026-01-01 00:00:00Z",
    volumes_before=("deepracer-0_data",),
)


def test_holder_labels_round_trip() -> None:
    assert holder_from_labels(holder_labels(HOLDER)) == HOLDER


@pytest.mark.parametrize(
    "labels",
    [{}, {"a": "b"}, {**holder_labels(HOLDER), "drgpu.lock.pid": "x"}],
)
def test_labels_naming_no_holder_give_none(labels: dict[str, str]) -> None:
    assert holder_from_labels(labels) is None


def test_a_holder_whose_process_lives_on_is_not_stale() -> None:
    assert not is_stale(HOLDER, HERE, start_ticks_now=4000)


@pytest.mark.parametrize("now", [None, 4001])
def test_a_holder_whose_pid_is_gone_or_reused_is_stale(now: int | None) -> None:
    assert is_stale(HOLDER, HERE, start_ticks_now=now)


def test_a_holder_from_before_this_machines_boot_is_stale() -> None:
    holder = replace(HOLDER, process=replace(HOLDER.process, machine_id="m1"))
    rebooted = Process(
        pid=1,
        start_ticks=1,
        boot_id="boot-b",
        pid_namespace="pid:[1]",
        host="box",
        machine_id="m1",
        booted="2026-01-02 00:00:00Z",
    )
    assert is_stale(holder, rebooted, start_ticks_now=None)


@pytest.mark.parametrize(
    "here",
    [
        Process(pid=1, start_ticks=1, boot_id="boot-x", pid_namespace="pid:[1]", host="other"),
        Process(pid=1, start_ticks=1, boot_id="boot-a", pid_namespace="pid:[9]", host="box"),
    ],
)
def test_a_holder_that_cannot_be_checked_is_never_stale(here: Process) -> None:
    assert not is_stale(HOLDER, here, start_ticks_now=None)


def test_a_down_after_an_up_began_supersedes_it() -> None:
    up = Process(pid=500, start_ticks=1000, boot_id="b", pid_namespace="n", host="h")

    def down(pid: int, ticks: int, boot: str = "b") -> Process:
        return Process(pid=pid, start_ticks=ticks, boot_id=boot, pid_namespace="n", host="h")

    assert superseded(down_marks({}, "deepracer-0", down(501, 1000)), "deepracer-0", up)
    assert not superseded(down_marks({}, "deepracer-0", down(499, 1000)), "deepracer-0", up)
    assert not superseded(down_marks({}, "deepracer-1", down(501, 1000)), "deepracer-0", up)
    assert not superseded(down_marks({}, "deepracer-0", down(9, 2000, "old")), "deepracer-0", up)
    assert not superseded({}, "deepracer-0", up)
    old = down_marks({}, "deepracer-1", down(9, 2000, "old"))
    assert list(down_marks(old, "deepracer-0", down(1, 1))) == ["drgpu.down.deepracer-0"]


def test_a_lock_label_number_in_other_digits_names_no_holder() -> None:
    """`int` reads Arabic-Indic `٣` as 3: a planted label with such digits names no holder."""
    from drgpu.core.lock_holder import holder_from_labels, holder_labels

    labels = dict(holder_labels(HOLDER))
    assert holder_from_labels(labels) is not None
    labels["drgpu.lock.pid"] = "٣"
    assert holder_from_labels(labels) is None
