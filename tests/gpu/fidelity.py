"""The fake NVML's fidelity to a machine: a topology written from its `drgpu gpus --json`,
and the fields where what the real driver and the fake say differ."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
QUERY = Path(__file__).resolve().parent / "nvml_fields.py"
PROBE = REPO / "drgpu" / "probe.py"
# The CUDA fields of the probe that a topology carries (the rest is the machine's own:
# timings, the Python, the hostname).
CUDA_FIELDS = ("uuid", "name", "pci_bus_id", "memory_total_mib", "compute_capability", "nvml_index")


def topology_from_inventory(
    inventory: Mapping[str, Any], cuda_totals: Mapping[str, int]
) -> dict[str, Any]:
    """The fake's topology for a machine's `gpus --json`: its format is the fake's
    already (extra fields are ignored); processes are left out (they come and go).
    `cuda_totals`: the memory CUDA reports per GPU UUID (less than NVML's: the driver
    keeps some), which `gpus --json` does not carry."""
    gpus = [
        {key: value for key, value in gpu.items() if key not in ("processes", "graphics_processes")}
        for gpu in inventory["gpus"]
    ]
    for gpu in gpus:
        if gpu["uuid"] in cuda_totals:
            gpu["cuda_memory_total_mib"] = cuda_totals[gpu["uuid"]]
    return {
        "driver_version": inventory["driver_version"],
        "cuda_driver_version": inventory["cuda_driver_version"],
        "gpus": gpus,
    }


def run_python(script: Path, *args: str, env: Mapping[str, str] | None = None) -> Any:
    """Run a script with this interpreter and read its JSON stdout."""
    done = subprocess.run(
        [sys.executable, str(script), *args],
        env=dict(env) if env is not None else None,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if not done.stdout.strip():
        raise AssertionError(f"{script.name} printed nothing: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout)


def fake_env(lib_dir: Path, topology: Path) -> dict[str, str]:
    """This environment, with the fake libraries first and the topology named."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES")
    }
    env["LD_LIBRARY_PATH"] = f"{lib_dir}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    env["FAKE_NVML_TOPOLOGY"] = str(topology)
    return env


def cuda_view(probe_report: Mapping[str, Any]) -> dict[str, Any]:
    """The probe's CUDA section, the fields a topology carries. A MIG device's name ends
    in its profile (`... MIG 3g.20gb`), which `gpus --json` does not carry: only the part
    before it is compared."""
    cuda = probe_report["cuda"]
    devices = []
    for device in cuda["devices"]:
        fields = {key: device.get(key) for key in CUDA_FIELDS}
        if str(fields["uuid"] or "").startswith("MIG-") and " MIG " in str(fields["name"]):
            fields["name"] = str(fields["name"]).rsplit(" ", 1)[0]
        devices.append(fields)
    return {"device_count": cuda["device_count"], "devices": devices}


def differences(real: Any, fake: Any, at: str = "") -> list[str]:
    """Every path where two JSON values differ: `gpus[0].name: real 'A' != fake 'B'`."""
    if isinstance(real, dict) and isinstance(fake, dict):
        found = []
        for key in sorted(set(real) | set(fake)):
            where = f"{at}.{key}" if at else str(key)
            found += differences(real.get(key, "<absent>"), fake.get(key, "<absent>"), where)
        return found
    if isinstance(real, list) and isinstance(fake, list) and len(real) == len(fake):
        return [
            d
            for i, (r, f) in enumerate(zip(real, fake, strict=True))
            for d in differences(r, f, f"{at}[{i}]")
        ]
    return [] if real == fake else [f"{at}: real {real!r} != fake {fake!r}"]
