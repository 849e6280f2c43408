"""What a bare index means: nvidia-smi's order, CUDA's order (known or guessed), and the
warning that names both GPUs where they differ."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from drgpu.core.devices import parse_devices
from drgpu.core.index_order import (
    CudaOrder,
    cuda_order,
    in_cuda_order,
    index_notes,
    order_from_cuda_devices,
    ordinals,
)
from drgpu.core.model import Inventory
from drgpu.core.modes import IndexOrder
from drgpu.core.planning import make_plan
from drgpu.core.settings import config_from_values
from drgpu.core.topology import inventory_from_json, inventory_to_json
from drgpu.errors import ConfigError, GpuValidationError
from drgpu.host.files import base_stack_file, load_inventory, load_stack

THREE_ORDERS = Path(__file__).parents[2] / "topologies" / "gtx1650-rtx3090-m40-orders.json"
M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"  # index 0 (bus 03), compute 5.2
GTX1650 = "GPU-3b1d9c52-7a4e-4f0b-8c6d-2e9f1a7b5c30"  # index 1 (bus 81), compute 7.5


def test_the_guess_is_highest_compute_capability_first(gtx_m40: Inventory) -> None:
    order = cuda_order(gtx_m40)
    assert order == CudaOrder((1, 0), known=False)
    assert ordinals(order) == {1: (0,), 0: (1,)}


def test_a_known_order_wins_over_the_guess(gtx_m40: Inventory) -> None:
    known = replace(gtx_m40, cuda_order=(0, 1))
    assert cuda_order(known) == CudaOrder((0, 1), known=True)


def test_the_guess_skips_lost_gpus_and_counts_mig_devices(mig_l4: Inventory) -> None:
    order = cuda_order(mig_l4).indices
    a100 = next(gpu for gpu in mig_l4.gpus if gpu.mig_mode)
    assert order.count(a100.index) == len(a100.mig_devices)


def test_cuda_devices_are_matched_by_uuid_or_bus_id(gtx_m40: Inventory) -> None:
    devices: list[dict[str, Any]] = [
        {"uuid": GTX1650.upper()},
        {"uuid": None, "pci_bus_id": "0000:03:00.0"},
    ]
    assert order_from_cuda_devices(gtx_m40, devices) == (1, 0)
    assert order_from_cuda_devices(gtx_m40, [{"uuid": "GPU-unknown"}]) is None


def test_bare_indices_read_as_cuda_ordinals(gtx_m40: Inventory) -> None:
    order = cuda_order(gtx_m40)
    request, problems = in_cuda_order(parse_devices("0,GPU-6f0c"), order)
    assert problems == []
    assert [s.text for s in request.selectors] == ["1", "GPU-6f0c"]
    _, problems = in_cuda_order(parse_devices("2"), order)
    assert problems == [
        "'2': CUDA has no device 2 here (DRGPU_INDEX_ORDER=cuda; CUDA devices 0 to 1)"
    ]


def test_the_warning_names_both_gpus_of_each_index(gtx_m40: Inventory) -> None:
    requests = [("DR_SAGEMAKER_CUDA_DEVICES", parse_devices("0")),
                ("DR_ROBOMAKER_CUDA_DEVICES", parse_devices(GTX1650))]  # fmt: skip
    warning, explanation = index_notes(requests, gtx_m40, cuda_order(gtx_m40), IndexOrder.PCI)
    assert explanation is None
    assert warning == (
        "CUDA's order (guessed: the CUDA driver's own is not known) differs from nvidia-smi's"
        " here: DR_SAGEMAKER_CUDA_DEVICES=0: nvidia-smi's GPU 0 is the Tesla M40 24GB (CUDA's 1),"
        " CUDA's GPU 0 the NVIDIA GeForce GTX 1650 (nvidia-smi's 1); drgpu reads nvidia-smi's"
        " (DRGPU_INDEX_ORDER=cuda: CUDA's, DRfC's 'CUDA number'; DRGPU_INDEX_ORDER=pci:"
        " nvidia-smi's, without this warning); a GPU UUID means one GPU in every order"
    )
    # Written DRGPU_INDEX_ORDER=pci: the same words, once, as an explanation.
    warning, explanation = index_notes(
        requests, gtx_m40, cuda_order(gtx_m40), IndexOrder.PCI, chosen=True
    )
    assert warning is None
    assert explanation is not None and explanation.startswith(
        "bare indices read in nvidia-smi's order (DRGPU_INDEX_ORDER=pci): CUDA's order"
    )
    known = replace(gtx_m40, cuda_order=(1, 0))
    warning, explanation = index_notes(requests, known, cuda_order(known), IndexOrder.CUDA)
    assert warning is None
    assert explanation is not None and explanation.startswith(
        "bare indices read in CUDA's order (DRGPU_INDEX_ORDER=cuda): CUDA's order differs"
    )


def test_unchosen_order_refused_naming_both_gpus_cuda_first_in_drfc(gtx_m40: Inventory) -> None:
    requests = [("DR_SAGEMAKER_CUDA_DEVICES", parse_devices("0"))]
    guessed = index_notes(requests, gtx_m40, cuda_order(gtx_m40), IndexOrder.PCI, refuse=True)
    assert guessed[0] is not None  # CUDA's order only guessed: a warning
    order = CudaOrder((1, 0), known=True)
    with pytest.raises(ConfigError) as refused:
        index_notes(requests, gtx_m40, order, IndexOrder.PCI, refuse=True, drfc=True)
    assert "DR_SAGEMAKER_CUDA_DEVICES=0: nvidia-smi's GPU 0 is the Tesla M40" in str(refused.value)
    assert refused.value.hint == (
        "write DRGPU_INDEX_ORDER=cuda (DRfC's 'CUDA number') or =pci (nvidia-smi's) in"
        " system.env; a GPU UUID means one GPU in every order"
    )
    chosen = index_notes(requests, gtx_m40, order, IndexOrder.PCI, chosen=True, refuse=True)
    assert chosen[0] is None
    same = replace(gtx_m40, cuda_order=(0, 1))
    assert index_notes(requests, same, cuda_order(same), IndexOrder.PCI, refuse=True) == (
        None,
        None,
    )


def test_no_warning_without_bare_indices_or_when_the_orders_agree(gtx_m40: Inventory) -> None:
    uuids = [("DR_SAGEMAKER_CUDA_DEVICES", parse_devices(M40))]
    assert index_notes(uuids, gtx_m40, cuda_order(gtx_m40), IndexOrder.PCI) == (None, None)
    same = replace(gtx_m40, cuda_order=(0, 1))
    bare = [("DR_SAGEMAKER_CUDA_DEVICES", parse_devices("0"))]
    assert index_notes(bare, same, cuda_order(same), IndexOrder.PCI) == (None, None)


def test_planning_in_cuda_order_gives_cudas_gpu(gtx_m40: Inventory) -> None:
    base_stack = load_stack([base_stack_file()])
    config = config_from_values(
        {"DR_SAGEMAKER_CUDA_DEVICES": "0", "DR_ROBOMAKER_CUDA_DEVICES": "1",
         "DRGPU_INDEX_ORDER": "cuda"}, {}
    )  # fmt: skip
    plan = make_plan(config, base_stack, replace(gtx_m40, cuda_order=(1, 0)))
    assert [d.uuid for d in plan.service("sagemaker").devices] == [GTX1650]
    assert [d.uuid for d in plan.service("robomaker").devices] == [M40]
    assert plan.index_note.startswith("bare indices in the settings are read in CUDA's default")
    assert "the GPUs shown here carry nvidia-smi's index" in plan.index_note
    too_far = config_from_values(
        {"DR_SAGEMAKER_CUDA_DEVICES": "5", "DRGPU_INDEX_ORDER": "cuda"}, {}
    )
    with pytest.raises(GpuValidationError, match="CUDA has no device 5"):
        make_plan(too_far, base_stack, gtx_m40)


def test_an_evaluation_says_nothing_of_the_unused_trainer_key(gtx_m40: Inventory) -> None:
    base_stack, known = load_stack([base_stack_file()]), replace(gtx_m40, cuda_order=(1, 0))
    values = {"DR_SAGEMAKER_CUDA_DEVICES": "1", "DR_ROBOMAKER_CUDA_DEVICES": M40}
    plan = make_plan(config_from_values(values, {}, evaluation=True), base_stack, known)
    assert not [e for e in plan.explanations if "DR_SAGEMAKER_CUDA_DEVICES=1" in e]
    # nor is it refused for an order it does not choose
    make_plan(
        config_from_values(values, {}, evaluation=True), base_stack, known, refuse_unordered=True
    )
    with pytest.raises(ConfigError, match="DR_SAGEMAKER_CUDA_DEVICES=1"):  # training: it is
        make_plan(config_from_values(values, {}), base_stack, known, refuse_unordered=True)


def test_index_order_must_be_pci_or_cuda() -> None:
    with pytest.raises(ConfigError, match="DRGPU_INDEX_ORDER: 'nvml' is not one of pci, cuda"):
        config_from_values({"DRGPU_INDEX_ORDER": "nvml"}, {})


def test_inventory_files_carry_cudas_order(tmp_path: Path, gtx_m40: Inventory) -> None:
    known = replace(gtx_m40, cuda_order=(1, 0))
    document = inventory_to_json(known)
    assert document["cuda_order"] == [1, 0]
    assert inventory_from_json(json.loads(json.dumps(document))) == known
    assert inventory_to_json(gtx_m40)["cuda_order"] is None
    path = tmp_path / "box.json"
    path.write_text(json.dumps({**document, "cuda_order": [0, 7]}))
    with pytest.raises(ConfigError, match="cuda_order must list NVML indices"):
        load_inventory(path)


def test_gpus_json_shows_both_orders_and_says_when_cudas_is_guessed(gtx_m40: Inventory) -> None:
    from drgpu.ui.documents import gpus_document as document

    guessed = document(gtx_m40, None)
    assert guessed["cuda_order"] is None  # nothing known to write into an inventory file
    assert guessed["cuda_order_guessed"] is True
    assert [gpu["cuda_indices"] for gpu in guessed["gpus"]] == [[1], [0]]
    known = document(replace(gtx_m40, cuda_order=(0, 1)), None)
    assert (known["cuda_order"], known["cuda_order_guessed"]) == ([0, 1], False)
    assert [gpu["cuda_indices"] for gpu in known["gpus"]] == [[0], [1]]


def test_a_lost_gpu_is_no_reordering() -> None:
    # CUDA numbers around a GPU it cannot use: the orders do not rank GPUs otherwise.
    lost = load_inventory(Path(__file__).parents[2] / "topologies" / "lost.json")
    assert not cuda_order(lost).reorders
    assert cuda_order(load_inventory(THREE_ORDERS)).reorders


def test_each_index_names_the_gpu_of_each_order_with_its_number_in_the_other() -> None:
    box = load_inventory(THREE_ORDERS)
    request = [("DR_ROBOMAKER_CUDA_DEVICES", parse_devices("0"))]
    warning, _ = index_notes(request, box, cuda_order(box), IndexOrder.PCI)
    assert warning is not None
    assert (
        "DR_ROBOMAKER_CUDA_DEVICES=0: nvidia-smi's GPU 0 is the NVIDIA GeForce GTX 1650"
        " (CUDA's 1), CUDA's GPU 0 the NVIDIA GeForce RTX 3090 (nvidia-smi's 1);"
    ) in warning
