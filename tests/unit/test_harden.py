"""The pure pieces of the hardening: the lock's holder and staleness, secrets and their
redaction, the mark a `down` leaves, and the signals drgpu catches."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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
from drgpu.core.model import Plan, Role, ServicePlan
from drgpu.core.redaction import holds_secret, masked_plan, redact, secret_values
from drgpu.core.secrets import MASK, is_secret, masked
from drgpu.host import signals
from drgpu.host.enginelock import start_ticks, this_process

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


def test_a_holder_from_before_this_hosts_boot_is_stale() -> None:
    rebooted = Process(pid=1, start_ticks=1, boot_id="boot-b", pid_namespace="pid:[1]", host="box")
    assert is_stale(HOLDER, rebooted, start_ticks_now=None)


@pytest.mark.parametrize(
    "here",
    [
        Process(pid=1, start_ticks=1, boot_id="boot-x", pid_namespace="pid:[1]", host="other"),
        Process(pid=1, start_ticks=1, boot_id="boot-a", pid_namespace="pid:[9]", host="box"),
    ],
)
def test_a_holder_that_cannot_be_checked_is_never_stale(here: Process) -> None:
    assert not is_stale(HOLDER, here, start_ticks_now=None)


def test_this_process_is_alive_and_a_reaped_child_is_not() -> None:
    me = this_process()
    assert start_ticks(me.pid) == me.start_ticks > 0
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert start_ticks(child.pid) is None


def test_a_zombie_counts_as_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while start_ticks(child.pid) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert Path(f"/proc/{child.pid}").exists()  # not reaped yet
    child.wait()


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DR_LOCAL_S3_MODEL_METADATA_KEY", True),
        ("github_token", True),
        ("DB_PASSWORD", True),
        ("DR_RUN_ID", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret(name) is secret
    assert masked(name, "value") == (MASK if secret else "value")
    assert masked(name, "") == ""


def test_redaction_masks_long_secret_values_only() -> None:
    values = {"A_KEY": "abc", "B_TOKEN": "tok-123456", "C_SECRET": "tok-123456789", "X": "tok-1"}
    secrets = secret_values(values)
    assert secrets == ("tok-123456789", "tok-123456")
    assert redact("a tok-123456789 b tok-123456 c abc", secrets) == "a **** b **** c abc"


def test_a_plan_shown_masks_secret_environment_values() -> None:
    service = ServicePlan(
        name="sagemaker",
        role=Role.TRAINER,
        devices=(),
        capabilities=(),
        environment=(("API_TOKEN", "t0ken-value"), ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")),
        labels=(),
    )
    plan = Plan(project="deepracer-0", run_id="0", services=(service,))
    assert holds_secret(plan)
    assert masked_plan(plan).services[0].environment == (
        ("API_TOKEN", MASK),
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
    )


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


def test_the_first_caught_signal_interrupts_and_the_rest_are_ignored() -> None:
    before = {signum: signal.getsignal(signum) for signum in signals.CAUGHT}
    with pytest.raises(signals.Interrupted) as caught, signals.caught():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    assert caught.value.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    os.kill(os.getpid(), signal.SIGTERM)  # ignored: this test lives on
    for signum, handler in before.items():  # an ignored SIGINT would reach later subprocesses
        signal.signal(signum, handler)


def test_a_shielded_block_runs_to_its_end_and_tells_of_each_signal() -> None:
    told: list[str] = []
    finished = False
    with signals.caught(), signals.shielded(told.append):
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.1)
        finished = True
    assert finished
    assert told == ["SIGHUP"]
