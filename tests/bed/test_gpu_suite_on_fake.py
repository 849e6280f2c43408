"""The real-GPU suite's machinery (tests/gpu), proven here on the fake driver: the query
script and the topology written from `gpus --json` agree with the topology they came
from, and `status --json` over the stand-in engine shows a host process with its PID and
memory, as the suite expects of a real one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.gpu.empty_engine import serving_no_containers
from tests.gpu.fidelity import (
    PROBE,
    QUERY,
    REPO,
    cuda_view,
    differences,
    fake_env,
    run_python,
    topology_from_inventory,
)
from tests.support.runners import run_drgpu

TOPOLOGIES = REPO / "tests" / "topologies"


@pytest.fixture(scope="module")
def lib_dir() -> Path:
    built = subprocess.run(
        [str(REPO / "scripts" / "fake-nvml-build")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    return Path(built.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", ["gtx1650-m40.json", "mig.json", "three-gpus-unordered.json"])
def test_a_topology_written_from_gpus_json_answers_as_the_machine(
    lib_dir: Path, tmp_path: Path, name: str
) -> None:
    topology = json.loads((TOPOLOGIES / name).read_text())
    for gpu in topology["gpus"]:  # as a real driver: CUDA's total is less than NVML's
        gpu["cuda_memory_total_mib"] = gpu.get("memory_total_mib", 16384) - 616
    (original := tmp_path / "machine.json").write_text(json.dumps(topology))
    machine = fake_env(lib_dir, original)
    listed = run_drgpu("gpus", "--json", env={**machine, "DOCKER_HOST": "unix:///nonexistent"})
    reals = {
        order: run_python(PROBE, "--json", env={**machine, "CUDA_DEVICE_ORDER": order})
        for order in ("PCI_BUS_ID", "FASTEST_FIRST")
    }
    totals = {d["uuid"]: d["memory_total_mib"] for d in reals["PCI_BUS_ID"]["cuda"]["devices"]}
    nvml_totals = {g["uuid"]: g["memory_total_mib"] for g in json.loads(listed.stdout)["gpus"]}
    assert all(totals[uuid] == nvml_totals[uuid] - 616 for uuid in totals.keys() & nvml_totals)
    written = tmp_path / "topology.json"
    written.write_text(json.dumps(topology_from_inventory(json.loads(listed.stdout), totals)))
    copy = fake_env(lib_dir, written)
    assert differences(run_python(QUERY, env=machine), run_python(QUERY, env=copy)) == []
    for order, real in reals.items():
        fake = run_python(PROBE, "--json", env={**copy, "CUDA_DEVICE_ORDER": order})
        assert differences(cuda_view(real), cuda_view(fake)) == []


def test_status_over_the_stand_in_engine_shows_a_host_process(
    lib_dir: Path, tmp_path: Path
) -> None:
    """This very process, listed by the fake NVML on GPU 0, is a stray on the host."""
    topology = json.loads((TOPOLOGIES / "gtx1650-m40.json").read_text())
    topology["gpus"][1]["processes"] = [{"pid": os.getpid(), "used_memory_mib": 300}]
    path = tmp_path / "topology.json"
    path.write_text(json.dumps(topology))
    with serving_no_containers(tmp_path / "engine.sock") as address:
        shown = run_drgpu(
            "status", "--json", env={**fake_env(lib_dir, path), "DOCKER_HOST": address}
        )
    document = json.loads(shown.stdout)
    [process] = document["processes"]
    assert (process["pid"], process["gpu_index"], process["used_memory_mib"]) == (
        os.getpid(),
        0,  # the M40 at bus 03 comes first in PCI order
        300,
    )
    assert process["verdict"] == "stray" and process["container"] is None
    assert shown.returncode == 6
