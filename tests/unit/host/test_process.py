"""drgpu/host/process.py: programs run, and stopped with everything they started."""

from __future__ import annotations

import time

import pytest

from drgpu.errors import DockerError
from drgpu.host import process


def test_a_stopped_script_takes_the_programs_it_started_along() -> None:
    # A script's own program (DRfC's start script runs docker) keeps the pipes open: the
    # stop must reach it too, or drgpu would wait for it.
    began = time.monotonic()
    with pytest.raises(DockerError, match="did not finish"):
        process.run(["bash", "-c", "sleep 30; echo done"], timeout=0.5)
    assert time.monotonic() - began < 10
