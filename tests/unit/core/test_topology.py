"""The topology JSON format: NVML's index order, round trips, defaults and bad documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from drgpu.core.model import Gpu, GpuProcess, Inventory, MigDevice
from drgpu.core.topology import checked_pci_bus_id, inventory_from_json, inventory_to_json
from drgpu.errors import ConfigError
from drgpu.host.files import load_inventory

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "inventories"
GPU_A = "GPU-0000000a-0000-4000-8000-000000000000"
GPU_B = "GPU-0000000b-0000-4000-8000-000000000000"
GPU_C = "GPU-0000000c-0000-4000-8000-000000000000"
GPU_FIRST = "GPU-00000001-0000-4000-8000-000000000000"
GPU_SECOND = "GPU-00000002-0000-4000-8000-000000000000"
MIG_A1 = "MIG-000000a1-0000-5000-8000-000000000000"
MIG_A2 = f"MIG-{GPU_A}/1/0"  # the form of drivers before R470


def gpu_entry(uuid: str, pci_bus_id: str, **fields: Any) -> dict[str, Any]:
    return {"uuid": uuid, "pci_bus_id": pci_bus_id, **fields}


def indexed(inventory: Inventory) -> list[tuple[int, str]]:
    return [(gpu.index, gpu.uuid) for gpu in inventory.gpus]


def test_gpus_listed_out_of_pci_order_get_indices_in_pci_order() -> None:
    inventory = inventory_from_json(
        {
            "gpus": [
                gpu_entry(GPU_C, "00000000:81:00.0", index=0),
                gpu_entry(GPU_A, "00000000:03:00.0", index=1),
                gpu_entry(GPU_B, "00000000:41:00.0", index=2),
            ]
        }
    )
    assert indexed(inventory) == [(0, GPU_A), (1, GPU_B), (2, GPU_C)]


def test_pci_order_sorts_by_domain_before_bus() -> None:
    inventory = inventory_from_json(
        {"gpus": [gpu_entry(GPU_SECOND, "0001:01:00.0"), gpu_entry(GPU_FIRST, "ff:00.0")]}
    )
    assert indexed(inventory) == [(0, GPU_FIRST), (1, GPU_SECOND)]


def test_pci_order_is_numeric_not_textual() -> None:
    inventory = inventory_from_json(
        {"gpus": [gpu_entry(GPU_B, "10:00.0"), gpu_entry(GPU_A, "9:00.0")]}
    )
    assert indexed(inventory) == [(0, GPU_A), (1, GPU_B)]


def test_example_inventory_puts_the_m40_first(gtx_m40: Inventory) -> None:
    assert [(gpu.index, gpu.name) for gpu in gtx_m40.gpus] == [
        (0, "Tesla M40 24GB"),
        (1, "NVIDIA GeForce GTX 1650"),
    ]


def test_lost_gpu_without_a_bus_id_keeps_its_written_index() -> None:
    inventory = inventory_from_json(
        {
            "gpus": [
                gpu_entry(GPU_B, "02:00.0"),
                {"index": 0, "error": "GPU is lost", "pci_bus_id": ""},
                gpu_entry(GPU_A, "01:00.0"),
            ]
        }
    )
    assert [(gpu.index, gpu.uuid, gpu.lost) for gpu in inventory.gpus] == [
        (0, "", True),
        (1, GPU_A, False),
        (2, GPU_B, False),
    ]


@pytest.mark.parametrize("name", ["gtx1650-m40.json", "a100-mig-plus-l4.json"])
def test_json_round_trip_is_identity_on_example_inventories(name: str) -> None:
    inventory = load_inventory(EXAMPLES / name)
    document = json.loads(json.dumps(inventory_to_json(inventory)))
    assert inventory_from_json(document) == inventory


def test_json_round_trip_keeps_every_field() -> None:
    inventory = Inventory(
        gpus=(
            Gpu(
                index=0,
                uuid=GPU_A,
                name="NVIDIA A30",
                pci_bus_id="00000000:01:00.0",
                memory_total_mib=24576,
                memory_used_mib=100,
                compute_capability=(8, 0),
                utilization_gpu_percent=42,
                mig_mode=True,
                mig_devices=(MigDevice(MIG_A1, 6016), MigDevice(MIG_A2, 6016)),
                processes=(GpuProcess(pid=4242, used_memory_mib=90),),
            ),
            Gpu(1, "", "GPU", "", 0, error="GPU is lost"),
        ),
        driver_version="550.54.14",
        cuda_driver_version=12040,
        init_error=None,
    )
    document = json.loads(json.dumps(inventory_to_json(inventory)))
    assert inventory_from_json(document) == inventory


def test_missing_fields_take_defaults() -> None:
    inventory = inventory_from_json({"gpus": [{"uuid": GPU_A, "pci_bus_id": "3:00.0"}]})
    assert inventory == Inventory(
        gpus=(
            Gpu(
                index=0,
                uuid=GPU_A,
                name="GPU",
                pci_bus_id="00000000:03:00.0",
                memory_total_mib=0,
                memory_used_mib=0,
                compute_capability=(0, 0),
                utilization_gpu_percent=None,
                mig_mode=False,
                mig_devices=(),
                processes=(),
                error=None,
            ),
        ),
        driver_version=None,
        cuda_driver_version=None,
        init_error=None,
    )


def test_empty_document_is_a_machine_without_gpus() -> None:
    assert inventory_from_json({}) == Inventory(gpus=())


def test_init_error_is_kept() -> None:
    inventory = inventory_from_json({"gpus": [], "init_error": "driver_not_loaded"})
    assert inventory.init_error == "driver_not_loaded"


@pytest.mark.parametrize(
    ("text", "spelling"),
    [
        ("00000000:81:00.0", "00000000:81:00.0"),
        ("0000:81:00.0", "00000000:81:00.0"),
        ("81:00.0", "00000000:81:00.0"),
        ("0000:af:00.1", "00000000:AF:00.1"),
    ],
)
def test_bus_ids_are_normalized_to_nvml_spelling(text: str, spelling: str) -> None:
    assert checked_pci_bus_id(text) == spelling


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ([], "expected an object with a 'gpus' list"),
        ({"gpus": {"uuid": GPU_A}}, "expected an object with a 'gpus' list"),
        ({"gpus": None}, "expected an object with a 'gpus' list"),
        ({"gpus": [GPU_A]}, "bad GPU entry"),
        ({"gpus": [{"pci_bus_id": "01:00.0"}]}, "bad GPU entry ('uuid')"),
        ({"gpus": [{"uuid": GPU_A}]}, "bad GPU entry (not a PCI bus id: '')"),
        ({"gpus": [gpu_entry(GPU_A, "bus 1")]}, "bad GPU entry"),
        ({"gpus": [gpu_entry(GPU_A, "01:00.0", memory_total_mib="lots")]}, "bad GPU entry"),
        ({"gpus": [gpu_entry(GPU_A, "01:00.0", compute_capability=[8])]}, "bad GPU entry"),
        ({"gpus": [gpu_entry(GPU_A, "01:00.0", mig_devices=[{"uuid": "M"}])]}, "bad GPU"),
        ({"gpus": [], "cuda_driver_version": "twelve"}, "cuda_driver_version 'twelve'"),
    ],
)
def test_bad_documents_are_config_errors(document: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        inventory_from_json(document, source="box.json")
    assert caught.value.message.startswith("box.json: ")
    assert fragment in caught.value.message


def test_invalid_json_file_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "box.json"
    path.write_text('{\n  "gpus": [,]\n}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"box\.json:2: not valid JSON"):
        load_inventory(path)


def test_missing_inventory_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read inventory"):
        load_inventory(tmp_path / "absent.json")


def test_binary_inventory_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "box.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_inventory(path)


def test_processes_that_could_not_be_listed_stay_unknown_in_an_inventory_file() -> None:
    """`gpus --json` on a machine whose NVML cannot list a GPU's processes: a plan on that
    file must not read the empty list as "no process"."""
    gpu = Gpu(0, GPU_A, "Tesla T4", "00000000:01:00.0", 15360, processes_unknown="Unknown Error")
    document = json.loads(json.dumps(inventory_to_json(Inventory(gpus=(gpu,)))))
    assert document["gpus"][0]["processes_error"] == "Unknown Error"
    assert inventory_from_json(document).gpus[0].processes_unknown == "Unknown Error"


@pytest.mark.parametrize(
    "uuid",
    [
        'GPU-x" || true || "x',
        "}}{{",
        "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a1",  # a digit short
        "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11\n",
        "gpu-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11",
        "MIG-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11",  # a MIG device's, for a GPU
        "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a1g",
        "GPU-$HOME",
    ],
)
def test_a_gpu_uuid_outside_nvidias_grammar_is_refused(uuid: str) -> None:
    with pytest.raises(ConfigError, match="is not a GPU UUID"):
        inventory_from_json({"gpus": [gpu_entry(uuid, "01:00.0")]})


@pytest.mark.parametrize(
    ("uuid", "valid"),
    [
        ("MIG-5c8a3f20-1d4b-5e6f-8a9b-0c1d2e3f4a5b", True),
        (f"MIG-{GPU_A}/7/0", True),  # before R470
        ("MIG-5c8a3f20", False),
        (f"MIG-{GPU_A}/7", False),
        ('MIG-x" || "x', False),
        ("GPU-5c8a3f20-1d4b-5e6f-8a9b-0c1d2e3f4a5b", False),
    ],
)
def test_mig_uuids_follow_nvidias_grammar(uuid: str, valid: bool) -> None:
    document = {"gpus": [gpu_entry(GPU_A, "01:00.0", mig_mode=True, mig_devices=[mig(uuid)])]}
    if valid:
        assert inventory_from_json(document).gpus[0].mig_devices[0].uuid == uuid
    else:
        with pytest.raises(ConfigError, match="is not a MIG UUID"):
            inventory_from_json(document)


def mig(uuid: str) -> dict[str, Any]:
    return {"uuid": uuid, "memory_total_mib": 4864}


def test_a_lost_gpu_may_have_no_uuid() -> None:
    lost = {"index": 0, "error": "GPU is lost", "pci_bus_id": ""}
    assert inventory_from_json({"gpus": [lost]}).gpus[0].uuid == ""
