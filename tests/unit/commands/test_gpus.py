"""drgpu/commands/gpus.py: NVML and the engine are asked at once."""

from __future__ import annotations

import threading

import pytest

from drgpu.commands import gpus
from drgpu.errors import NvmlUnavailableError
from drgpu.host import engine, nvml


def test_nvml_failing_is_said_without_waiting_for_the_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answered, release = threading.Event(), threading.Event()

    def slow_engine() -> list[object]:
        release.wait(5)
        answered.set()
        return []

    def no_driver() -> object:
        raise NvmlUnavailableError("NVML cannot be loaded")

    monkeypatch.setattr(engine, "drgpu_containers", slow_engine)
    monkeypatch.setattr(nvml, "read_inventory", no_driver)
    with pytest.raises(NvmlUnavailableError):
        gpus.gpus()
    assert not answered.is_set()  # the engine's answer was not waited for
    release.set()
