"""drgpu/host/signals.py: the signals drgpu catches."""

from __future__ import annotations

import os
import signal
import time

import pytest

from drgpu.host import signals


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


def test_a_signal_ignored_when_drgpu_starts_stays_ignored() -> None:
    """Started with nohup (or in the background: SIGINT), drgpu does not catch it."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with signals.caught():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGHUP)  # ignored: this test lives on
            time.sleep(0.1)
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)
