"""On a machine with a real NVIDIA GPU: drgpu against the driver itself, with no Docker.

- `drgpu gpus --json` lists what `nvidia-smi --query-gpu` lists (index, UUID, PCI bus id,
  memory), in PCI order;
- a compute process started here through the CUDA driver API (ctypes: cuInit,
  cuCtxCreate, cuMemAlloc) is seen by `drgpu status --json` as a host process on its GPU,
  with its PID and memory;
- the probe's CUDA order and its mapping of CUDA ordinals to NVML indices;
- a full UUID in CUDA_VISIBLE_DEVICES, as drgpu renders it, is that one GPU to CUDA and
  torch;
- doctor's NVML checks;
- the fake NVML's fidelity: one query script (nvml_fields.py) over the real driver and over
  the fake with a topology written from this machine's `gpus --json` agree field by field,
  and so do the probe's CUDA views.

Every command's output is written to the folder of the `hardware_out` fixture
($DRGPU_HARDWARE_OUT; scripts/test-gpu keeps it under docs/hardware/<date>/). Skipped where
no real driver loads (tests/gpu/conftest.py); never run against the test bed's fake.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

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

pytestmark = pytest.mark.gpu

ALLOCATED_MIB = 256
# A process with a CUDA context and memory on CUDA device 0 (PCI order: NVML index 0),
# alive until its stdin closes.
COMPUTE = f"""
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
def ok(code, what):
    if code != 0:
        print(f"{{what}} failed: {{code}}", flush=True)
        sys.exit(1)
device, context, memory = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
ok(cuda.cuInit(0), "cuInit")
ok(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
ok(cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device), "cuCtxCreate")
ok(cuda.cuMemAlloc_v2(ctypes.byref(memory), {ALLOCATED_MIB} << 20), "cuMemAlloc")
print("ready", flush=True)
sys.stdin.read()
"""


def drgpu(out: Path, name: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run drgpu (this checkout) and keep what it printed as `name` in the output folder."""
    path = os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))
    done = run_drgpu(*args, env={**os.environ, "PYTHONPATH": path, **env})
    (out / name).write_text(done.stdout)
    if done.stderr:
        (out / f"{name}.stderr").write_text(done.stderr)
    return done


def nvidia_smi(out: Path) -> list[dict[str, str]]:
    """nvidia-smi's rows (kept as nvidia-smi.csv)."""
    if shutil.which("nvidia-smi") is None:
        pytest.fail("nvidia-smi is not on PATH beside a real driver")
    fields = "index,uuid,pci.bus_id,memory.total,driver_version,name"
    done = subprocess.run(
        ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (out / "nvidia-smi.csv").write_text(f"{fields}\n{done.stdout}")
    rows = csv.reader(io.StringIO(done.stdout), skipinitialspace=True)
    return [dict(zip(fields.split(","), row, strict=True)) for row in rows if row]


def probe(out: Path, name: str, *args: str, **env: str) -> dict[str, Any]:
    """The probe's report (kept as `name`), run as a plain script."""
    environment = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
    }
    done = subprocess.run(
        [sys.executable, "-I", str(PROBE), "--json", *args],
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    (out / name).write_text(done.stdout)
    report: dict[str, Any] = json.loads(done.stdout)
    report["exit_code"] = done.returncode
    return report


def test_gpus_json_agrees_with_nvidia_smi(hardware_out: Path, empty_engine: str) -> None:
    listed = drgpu(hardware_out, "gpus.json", "gpus", "--json", DOCKER_HOST=empty_engine)
    assert listed.returncode == 0, listed.stderr
    gpus = json.loads(listed.stdout)["gpus"]
    rows = nvidia_smi(hardware_out)
    assert gpus, "the driver shows no GPU"
    assert len(gpus) == len(rows)
    for gpu, row in zip(gpus, rows, strict=True):
        assert gpu["index"] == int(row["index"])
        assert gpu["uuid"] == row["uuid"]
        assert gpu["pci_bus_id"].upper() == row["pci.bus_id"].upper()
        assert gpu["memory_total_mib"] == int(row["memory.total"])
        assert gpu["name"] == row["name"]
    assert [g["pci_bus_id"] for g in gpus] == sorted(g["pci_bus_id"] for g in gpus)


def test_a_compute_process_is_seen_by_status(hardware_out: Path, empty_engine: str) -> None:
    env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    child = subprocess.Popen(
        [sys.executable, "-c", COMPUTE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready", "the CUDA process did not start"
        seen: list[dict[str, Any]] = []
        document: dict[str, Any] = {}
        for _ in range(20):  # NVML lists a new context within a moment
            shown = drgpu(hardware_out, "status.json", "status", "--json", DOCKER_HOST=empty_engine)
            document = json.loads(shown.stdout)
            seen = [p for p in document["processes"] if p["pid"] == child.pid]
            if seen:
                break
            time.sleep(0.5)
        assert seen, f"status lists no process {child.pid}: {document.get('processes')}"
        [process] = seen
        assert process["gpu_index"] == 0
        assert "C" in process["type"]
        assert process["used_memory_mib"] >= ALLOCATED_MIB
        assert process["verdict"] == "stray"  # a compute process in no drgpu stack
        assert process["container"] is None and process["run_id"] is None
        assert shown.returncode == 6  # a stray is a violation
        assert document["gpus"][0]["processes_known"] is True
    finally:
        if child.stdin:
            child.stdin.close()
        child.wait(timeout=60)


def test_the_probe_maps_cuda_to_nvml_in_both_orders(hardware_out: Path, empty_engine: str) -> None:
    listed = json.loads(
        drgpu(
            hardware_out, "gpus-for-probe.json", "gpus", "--json", DOCKER_HOST=empty_engine
        ).stdout
    )
    pci = probe(hardware_out, "probe-pci-order.json", CUDA_DEVICE_ORDER="PCI_BUS_ID")
    assert pci["cuda"]["available"], pci["cuda"]["error"]
    assert pci["cuda"]["ordinals_match_nvml_indices"] is True
    assert all(d["matched_by"] == "uuid" for d in pci["cuda"]["devices"])
    default = probe(hardware_out, "probe.json", "--frameworks", "torch")
    mapped = [device["nvml_index"] for device in default["cuda"]["devices"]]
    assert mapped == listed["cuda_order"]  # drgpu's CUDA order is the driver's own
    uuids = [gpu["uuid"] for gpu in listed["gpus"] if not gpu["mig_mode"]]
    expecting = probe(
        hardware_out,
        "probe-expect.json",
        *[arg for uuid in uuids for arg in ("--expect-uuid", uuid)],
    )
    assert expecting["exit_code"] == 0, expecting["expectations"]
    assert expecting["gpu_injection"] in (None, "runtime")  # no container: nothing injected


def test_a_rendered_uuid_is_one_device_to_cuda_and_torch(
    hardware_out: Path, empty_engine: str
) -> None:
    """What drgpu's override sets, CUDA_VISIBLE_DEVICES=<full UUID> with CUDA_DEVICE_ORDER=
    PCI_BUS_ID, gives CUDA and torch exactly that GPU (torch multiplies on it); a UUID of no
    GPU here gives CUDA none, and the probe says so."""
    listed = json.loads(
        drgpu(
            hardware_out, "gpus-for-uuids.json", "gpus", "--json", DOCKER_HOST=empty_engine
        ).stdout
    )
    for gpu in (gpu for gpu in listed["gpus"] if not gpu["mig_mode"]):
        seen = probe(
            hardware_out,
            f"probe-uuid-{gpu['index']}.json",
            "--frameworks",
            "torch",
            CUDA_VISIBLE_DEVICES=gpu["uuid"],
            CUDA_DEVICE_ORDER="PCI_BUS_ID",
        )
        assert [device["uuid"] for device in seen["cuda"]["devices"]] == [gpu["uuid"]]
        torch = seen["frameworks"]["torch"]
        if torch["installed"]:
            assert torch["device_count"] == 1, torch
            assert torch["devices"][0]["uuid"] in gpu["uuid"], torch
            assert torch["devices"][0]["matmul"]["ok"], torch
    absent = "GPU-00000000-0000-0000-0000-000000000000"
    nothing = probe(
        hardware_out,
        "probe-uuid-absent.json",
        CUDA_VISIBLE_DEVICES=absent,
        CUDA_DEVICE_ORDER="PCI_BUS_ID",
    )
    assert nothing["cuda"]["devices"] == []
    assert any("CUDA_ERROR_NO_DEVICE" in finding for finding in nothing["findings"])


def test_doctors_nvml_checks_pass(hardware_out: Path, tmp_path: Path) -> None:
    rows = nvidia_smi(hardware_out)
    env_file = tmp_path / "system.env"
    shutil.copyfile(REPO / "system.env.example", env_file)
    done = drgpu(hardware_out, "doctor.json", "doctor", "--json", "--env-file", str(env_file))
    checks = {check["kind"]: check for check in json.loads(done.stdout)["findings"]}
    assert checks["nvml"]["level"] == "ok", checks["nvml"]
    assert f"driver {rows[0]['driver_version']}," in checks["nvml"]["message"]
    assert f"{len(rows)} GPU(s)" in checks["nvml"]["message"]
    assert checks["gpus"]["level"] == "ok", checks["gpus"]
    assert "persistence" in checks


def test_the_fake_nvml_agrees_with_the_real_driver(
    hardware_out: Path, fake_lib_dir: Path, empty_engine: str
) -> None:
    real = run_python(QUERY)
    listed = json.loads(
        drgpu(hardware_out, "gpus-for-fake.json", "gpus", "--json", DOCKER_HOST=empty_engine).stdout
    )
    orders = ("PCI_BUS_ID", "FASTEST_FIRST")
    real_probes = {
        order: run_python(PROBE, "--json", env={**os.environ, "CUDA_DEVICE_ORDER": order})
        for order in orders
    }
    cuda_totals = {
        d["uuid"]: d["memory_total_mib"]
        for d in real_probes["PCI_BUS_ID"]["cuda"]["devices"]
        if d["uuid"] and d["memory_total_mib"]
    }
    topology = hardware_out / "fake-topology.json"
    topology.write_text(json.dumps(topology_from_inventory(listed, cuda_totals), indent=1))
    fake = run_python(QUERY, env=fake_env(fake_lib_dir, topology))
    views = {}
    for order in orders:
        fake_probe = run_python(
            PROBE, "--json", env={**fake_env(fake_lib_dir, topology), "CUDA_DEVICE_ORDER": order}
        )
        views[order] = (cuda_view(real_probes[order]), cuda_view(fake_probe))
    found = differences(real, fake) + [
        f"cuda {order} {d}" for order, (r, f) in views.items() for d in differences(r, f)
    ]
    (hardware_out / "fidelity.json").write_text(
        json.dumps({"real": real, "fake": fake, "cuda": views, "differences": found}, indent=1)
    )
    assert found == [], "\n".join(found)


def test_health_and_events_are_read_from_the_real_driver(hardware_out: Path) -> None:
    """The fields faults and cost need, as drgpu reads them (a driver or GPU without one:
    None, recorded in health.json with why events cannot be followed, if so): the energy
    counter rises while the GPU draws power, and the event set opens or says why not."""
    from drgpu.host import nvml

    rows = nvidia_smi(hardware_out)
    with nvml.nvml_session() as session:
        first = nvml.health_from_nvml(session, len(rows))
        follower = nvml.EventFollower(session)
        time.sleep(2.0)
        follower.close()
        later = nvml.health_from_nvml(session, len(rows))
    fields = [key for key in vars(first[0]) if key not in ("index", "uuid")]
    unsupported = {h.uuid: [k for k in fields if getattr(h, k) is None] for h in first}
    (hardware_out / "health.json").write_text(
        json.dumps(
            {
                "health": [vars(h) for h in later],
                "unsupported": unsupported,
                "events_unsupported": follower.unsupported,
                "events": [vars(e) for e in follower.events],
            },
            indent=1,
        )
    )
    assert [h.uuid for h in first] == [row["uuid"] for row in rows]
    assert all(h.persistence is not None for h in first)  # every Linux driver has it
    for before, after in zip(first, later, strict=True):
        if before.energy_mj is not None:  # Volta and later
            assert after.energy_mj is not None and after.energy_mj >= before.energy_mj
