"""Two machines with one host name must never break each other's lock (issue 23, defect
6): staleness needs the same machine (its machine id) and an earlier boot, never the
host name alone. The judgement is pure (core.lock_holder): the machines are faked."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drgpu.core.lock_holder import Holder, Process, holder_from_labels, holder_labels, is_stale
from tests.adversarial.helpers import PROPERTY

BOOTED_A = "2026-03-01 08:00:00Z"
HOST_A = Process(
    pid=4242,
    start_ticks=90_000,
    boot_id="boot-of-a",
    pid_namespace="pid:[4026531836]",
    host="trainer",
    machine_id="machine-a",
    booted=BOOTED_A,
)
# Host B: same host name, same (initial) pid namespace inode, another machine and boot.
HOST_B = replace(HOST_A, pid=77, boot_id="boot-of-b", machine_id="machine-b")
LIVE_UP_ON_A = Holder(
    process=HOST_A,
    user="root (uid 0)",
    command="up",
    project="deepracer-0",
    since="2026-03-01 09:00:00Z",
)


def test_a_live_up_on_another_machine_with_the_same_host_name_is_not_stale() -> None:
    # Host B cannot see A's processes: no process has A's pid here.
    assert not is_stale(LIVE_UP_ON_A, HOST_B, start_ticks_now=None)


def test_a_lock_of_an_older_drgpu_without_a_machine_id_is_never_presumed_dead() -> None:
    older = {
        key: value
        for key, value in holder_labels(LIVE_UP_ON_A).items()
        if not key.endswith(("machine_id", "booted"))
    }
    holder = holder_from_labels(older)
    assert holder is not None and holder.process.machine_id == ""
    assert not is_stale(holder, HOST_B, start_ticks_now=None)
    assert not is_stale(holder, replace(HOST_A, boot_id="a-later-boot"), start_ticks_now=None)


def test_this_machine_rebooted_after_the_lock_was_taken_makes_it_stale() -> None:
    rebooted = replace(HOST_A, boot_id="boot-2-of-a", booted="2026-03-02 07:00:00Z")
    assert is_stale(LIVE_UP_ON_A, rebooted, start_ticks_now=None)


@pytest.mark.parametrize("booted", ["", "2026-03-01 08:59:59Z"])
def test_a_clone_sharing_the_machine_id_booted_before_the_lock_keeps_it(booted: str) -> None:
    clone = replace(HOST_B, machine_id=HOST_A.machine_id, booted=booted)
    assert not is_stale(LIVE_UP_ON_A, clone, start_ticks_now=None)


@PROPERTY
@given(
    host=st.text(max_size=20),
    machine=st.text(max_size=40),
    boot=st.text(min_size=1, max_size=40),
    booted=st.text(max_size=25),
)
def test_another_machine_never_judges_a_holder_gone(
    host: str, machine: str, boot: str, booted: str
) -> None:
    """Whatever host name, boot and boot time the other machine has: never stale."""
    other = Process(
        pid=1,
        start_ticks=1,
        boot_id=boot,
        pid_namespace="pid:[9]",
        host=host,
        machine_id=machine if machine != HOST_A.machine_id else machine + "x",
        booted=booted,
    )
    assert not is_stale(LIVE_UP_ON_A, other, start_ticks_now=None)
