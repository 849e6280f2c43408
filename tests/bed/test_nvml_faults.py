"""drgpu's reads of GPU health and NVML's events over the fake driver (issue 30): energy,
clock-event reasons, retired and remapped pages, volatile ECC and persistence field by
field (None where the driver refuses one), and a watch's event follower receiving a
critical Xid, a GPU that fell off the bus and a double-bit ECC error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.bed.test_nvml_process_queries import lib_dir, run_on_fake_nvml

__all__ = ["lib_dir"]  # the fixture, shared
UUID = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"
READ = """
import dataclasses, json, time
from drgpu.host import nvml
health = [dataclasses.asdict(h) for h in nvml.read_health()]
with nvml.nvml_session() as session:
    follower = nvml.EventFollower(session)
    deadline = time.monotonic() + 10
    while len(follower.events) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    follower.close()
    events = [[e.index, e.uuid, e.type, e.xid] for e in follower.events]
print(json.dumps([health, events, follower.unsupported]))
"""
FAULTY = {
    "uuid": UUID,
    "power_w": 100,
    "energy_mj": 5000,
    "throttle_reasons": 0x40,
    "retired_pages_pending": True,
    "remapped_uncorrectable": 2,
    "remap_pending": True,
    "ecc_uncorrected": 3,
    "persistence_mode": False,
    "events": [{"type": "xid", "xid": 48}, {"type": "gpu_lost"}, {"type": "double_bit_ecc"}],
}


def read(lib_dir: Path, tmp_path: Path, document: dict[str, Any]) -> Any:
    return run_on_fake_nvml(lib_dir, tmp_path, document, READ)


def test_health_and_events_are_read(lib_dir: Path, tmp_path: Path) -> None:
    (faulty, healthy), events, unsupported = read(lib_dir, tmp_path, {"gpus": [FAULTY, {}]})
    assert faulty["energy_mj"] >= 5000
    assert {k: v for k, v in faulty.items() if k != "energy_mj"} == {
        "index": 0,
        "uuid": UUID,
        "throttle": 0x40,
        "retired_pending": True,
        "remapped_uncorrectable": 2,
        "remap_pending": True,
        "remap_failure": False,
        "ecc_uncorrected": 3,
        "persistence": False,
    }
    assert healthy["ecc_uncorrected"] is None  # the fake's default: ECC not supported
    assert (healthy["retired_pending"], healthy["persistence"]) == (False, True)
    assert events == [[0, UUID, 8, 48], [0, UUID, 8, 79], [0, UUID, 2, 0]]
    assert unsupported is None


def test_fields_and_events_the_driver_refuses_are_none(lib_dir: Path, tmp_path: Path) -> None:
    refused = [
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetRetiredPagesPendingStatus",
        "nvmlEventSetCreate",
    ]
    document = {"gpus": [FAULTY], "missing_symbols": refused[:2], "denied_symbols": refused[2:]}
    ((health,), events, unsupported) = read(lib_dir, tmp_path, document)
    assert [health[k] for k in ("energy_mj", "remap_pending", "retired_pending")] == [None] * 3
    assert health["throttle"] == 0x40
    assert events == [] and unsupported == "Insufficient Permissions"
