"""CUDA's own order, asked of the (fake) CUDA driver: `gpus` shows it, `plan` warns by it,
and `DRGPU_INDEX_ORDER=cuda` reads bare indices in it.

The fake libcuda.so.1 enumerates fastest first (compute capability, then SM count, then
PCI order), as CUDA does by default; drgpu's guess without a driver knows no SM count.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.bed.test_fake_nvml import TOPOLOGIES, run_build
from tests.plan_warnings import messages
from tests.support.runners import run_drgpu

THREE_UNORDERED = TOPOLOGIES / "three-gpus-unordered.json"  # T4 3b, A100 81, RTX 3090 c1
# Same compute capability: only the CUDA driver knows the second is faster (more SMs).
TWINS = {
    "gpus": [
        {"uuid": "GPU-aaaaaaaa-0000-4000-8000-000000000001", "name": "Small",
         "pci_bus_id": "00000000:03:00.0", "compute_capability": [8, 6],
         "multiprocessor_count": 28},
        {"uuid": "GPU-bbbbbbbb-0000-4000-8000-000000000002", "name": "Big",
         "pci_bus_id": "00000000:81:00.0", "compute_capability": [8, 6],
         "multiprocessor_count": 82},
    ]
}  # fmt: skip


@pytest.fixture(scope="module")
def lib_dir() -> Path:
    built = run_build()
    assert built.returncode == 0, built.stderr
    return Path(built.stdout.strip().splitlines()[-1])


def drgpu(
    lib_dir: Path, topology: Path, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """The real CLI on the fake driver; no Docker engine (what other runs hold is unknown)."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DR_", "DRGPU_", "CUDA_")) and key != "FAKE_NVML_TOPOLOGY"
    }
    environment.update(
        LD_LIBRARY_PATH=str(lib_dir),
        FAKE_NVML_TOPOLOGY=str(topology),
        DOCKER_HOST=f"unix://{topology.parent}/absent.sock",
        **env,
    )
    return run_drgpu(*args, env=environment, timeout=120)


def write_env(tmp_path: Path, trainer: str, simulator: str) -> Path:
    path = tmp_path / "system.env"
    path.write_text(f"DR_SAGEMAKER_CUDA_DEVICES={trainer}\nDR_ROBOMAKER_CUDA_DEVICES={simulator}\n")
    return path


def test_gpus_shows_both_orders_and_writes_cudas_into_the_inventory(
    lib_dir: Path, tmp_path: Path
) -> None:
    done = drgpu(lib_dir, THREE_UNORDERED, "gpus", "--json", CUDA_DEVICE_ORDER="PCI_BUS_ID")
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    names = [gpu["name"] for gpu in document["gpus"]]
    assert names == ["Tesla T4", "NVIDIA A100 80GB PCIe", "NVIDIA GeForce RTX 3090"]
    assert document["cuda_order"] == [2, 1, 0]  # fastest first, whatever this shell sets
    assert document["cuda_order_guessed"] is False
    assert [gpu["cuda_indices"] for gpu in document["gpus"]] == [[2], [1], [0]]
    table = drgpu(lib_dir, THREE_UNORDERED, "gpus")
    assert "CUDA" in table.stdout
    assert "CUDA's default order (fastest first, column CUDA) differs" in table.stderr

    # The inventory file carries CUDA's order: planning elsewhere knows it too.
    inventory = tmp_path / "box.json"
    inventory.write_text(done.stdout)
    env = write_env(tmp_path, "0", "2")
    planned = drgpu(
        lib_dir, THREE_UNORDERED, "plan", "--env-file", str(env), "--inventory", str(inventory)
    )
    assert planned.returncode == 0, planned.stderr
    assert "guessed" not in planned.stderr
    assert (
        "DR_SAGEMAKER_CUDA_DEVICES=0: nvidia-smi's GPU 0 is the Tesla T4 (CUDA's 2), CUDA's GPU 0"
        " the NVIDIA GeForce RTX 3090 (nvidia-smi's 2)"
    ) in planned.stderr


def test_plan_on_the_host_warns_naming_both_gpus_of_each_index(
    lib_dir: Path, tmp_path: Path
) -> None:
    env = write_env(tmp_path, "1", "0")
    done = drgpu(lib_dir, THREE_UNORDERED, "plan", "--env-file", str(env), "--json")
    assert done.returncode == 0, done.stderr
    warning = next(w for w in messages(json.loads(done.stdout)) if w.startswith("CUDA's"))
    assert warning.startswith("CUDA's order differs from nvidia-smi's here: ")
    assert (
        "DR_ROBOMAKER_CUDA_DEVICES=0: nvidia-smi's GPU 0 is the Tesla T4 (CUDA's 2), CUDA's GPU 0"
        " the NVIDIA GeForce RTX 3090 (nvidia-smi's 2)"
    ) in warning
    # Index 1 is the A100 in both orders: nothing to say about it.
    assert "DR_SAGEMAKER_CUDA_DEVICES" not in warning
    assert f"drgpu: warning: {warning}" in done.stderr


def test_index_order_cuda_reads_drfcs_cuda_number(lib_dir: Path, tmp_path: Path) -> None:
    env = write_env(tmp_path, "0", "2")
    done = drgpu(
        lib_dir, THREE_UNORDERED, "plan", "--env-file", str(env), "--json", DRGPU_INDEX_ORDER="cuda"
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    trainer = document["services"]["sagemaker"]["gpus"]
    simulator = document["services"]["robomaker"]["gpus"]
    assert [gpu["name"] for gpu in trainer] == ["NVIDIA GeForce RTX 3090"]  # CUDA's 0
    assert [gpu["name"] for gpu in simulator] == ["Tesla T4"]  # CUDA's 2
    assert not any(w.startswith("CUDA's") for w in messages(document))
    assert any("read in CUDA's order" in line for line in document["explanations"])


def test_the_driver_knows_what_drgpus_guess_cannot(lib_dir: Path, tmp_path: Path) -> None:
    topology = tmp_path / "twins.json"
    topology.write_text(json.dumps(TWINS))
    env = write_env(tmp_path, "0", "1")
    done = drgpu(lib_dir, topology, "plan", "--env-file", str(env))
    assert done.returncode == 0, done.stderr
    assert (
        "DR_SAGEMAKER_CUDA_DEVICES=0: nvidia-smi's GPU 0 is the Small (CUDA's 1), CUDA's GPU 0"
        " the Big (nvidia-smi's 1)"
    ) in done.stderr
    # The same box as an inventory file without cuda_order: drgpu guesses, and says so.
    inventory = tmp_path / "twins-inventory.json"
    inventory.write_text(json.dumps(TWINS))
    guessed = drgpu(
        lib_dir, topology, "plan", "--env-file", str(env), "--inventory", str(inventory)
    )
    assert guessed.returncode == 0, guessed.stderr
    assert "CUDA's order" not in guessed.stderr  # same capability: the guess keeps PCI order
