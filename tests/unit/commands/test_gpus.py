"""drgpu/commands/gpus.py: NVML and the engine are asked at once."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from drgpu.commands import gpus
from drgpu.errors import NvmlUnavailableError
from drgpu.host import engine, nvml
from drgpu.host.files import load_inventory
from drgpu.ui.tables import show_gpus


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


@pytest.mark.parametrize("written", ["cuda", "pci", None])
def test_the_order_note_says_what_the_settings_here_choose(
    written: str | None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    inventory = load_inventory(
        Path(__file__).parents[2] / "topologies" / "gtx1650-rtx3090-m40-orders.json"
    )
    monkeypatch.setattr(engine, "drgpu_containers", list)
    monkeypatch.setattr(nvml, "read_inventory", lambda: inventory)
    monkeypatch.setattr(gpus, "default_order", lambda found: found.cuda_order)
    monkeypatch.delenv("DR_DIR", raising=False)
    monkeypatch.delenv("DRGPU_INDEX_ORDER", raising=False)
    monkeypatch.chdir(tmp_path)
    if written:
        (tmp_path / "system.env").write_text(f"DRGPU_INDEX_ORDER={written}\n")
    show_gpus(gpus.gpus(), json_output=False, full=False)
    reads = {
        "cuda": "the settings here read bare indices in CUDA's order (DRGPU_INDEX_ORDER=cuda)",
        "pci": "the settings here read bare indices in nvidia-smi's order (DRGPU_INDEX_ORDER=pci)",
        None: "drgpu reads bare indices in nvidia-smi's order (DRGPU_INDEX_ORDER=cuda: in CUDA's)",
    }[written]
    assert reads in " ".join(capsys.readouterr().err.split())
