"""drgpu's NVML process queries over the fake driver: each version (_v3, _v2, v1) the
driver lacks is skipped, its struct layout read right; a GPU whose processes no version
(or a failing query) lists is "unknown", never "no process".

The fake hides a version with the topology's `missing_symbols` (the function answers
NVML_ERROR_FUNCTION_NOT_FOUND, which pynvml raises as NVMLError_FunctionNotFound, as for
a symbol the library lacks) and fails every query of a GPU with `process_query_error`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "fake-nvml-build"
QUERIES = ("ComputeRunningProcesses", "GraphicsRunningProcesses")
# Two processes per list: a wrong struct layout would garble the second.
TOPOLOGY: dict[str, Any] = {
    "gpus": [
        {
            "uuid": "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11",
            "processes": [
                {"pid": 4242, "used_memory_mib": 512},
                {"pid": 4343, "used_memory_mib": 1024},
            ],
            "graphics_processes": [
                {"pid": 4343, "used_memory_mib": 1024},
                {"pid": 5151, "used_memory_mib": 64},
            ],
        }
    ]
}
SEEN = [[4242, 512, "C"], [4343, 1024, "C+G"], [5151, 64, "G"]]
READ = """
import json
from drgpu.host import nvml
gpus = nvml.read_inventory().gpus
print(json.dumps([
    {"processes": [[p.pid, p.used_memory_mib, p.kind] for p in g.processes],
     "unknown": g.processes_unknown}
    for g in gpus
]))
"""


@pytest.fixture(scope="module")
def lib_dir() -> Path:
    built = subprocess.run(
        [str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=300, check=False
    )
    assert built.returncode == 0, built.stderr
    return Path(built.stdout.strip().splitlines()[-1])


def run_on_fake_nvml(lib_dir: Path, tmp_path: Path, document: Any, script: str) -> Any:
    """What `script` (Python printing JSON) prints over the fake NVML with topology `document`."""
    topology = tmp_path / "topology.json"
    topology.write_text(json.dumps(document))
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib_dir), "FAKE_NVML_TOPOLOGY": str(topology)}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def read(lib_dir: Path, tmp_path: Path, **changes: Any) -> list[dict[str, Any]]:
    document = json.loads(json.dumps(TOPOLOGY))
    for key, value in changes.items():
        if key == "process_query_error":
            document["gpus"][0][key] = value
        else:
            document[key] = value
    result: list[dict[str, Any]] = run_on_fake_nvml(lib_dir, tmp_path, document, READ)
    return result


@pytest.mark.parametrize(
    "hidden",
    [(), ("_v3",), ("_v3", "_v2")],
    ids=["v3", "v2 (no v3)", "v1 (no v3, no v2)"],
)
def test_each_version_of_the_process_queries_is_read_right(
    lib_dir: Path, tmp_path: Path, hidden: tuple[str, ...]
) -> None:
    missing = [f"nvmlDeviceGet{query}{suffix}" for query in QUERIES for suffix in hidden]
    [gpu] = read(lib_dir, tmp_path, missing_symbols=missing)
    assert gpu == {"processes": SEEN, "unknown": None}


def test_a_driver_without_any_version_leaves_the_processes_unknown(
    lib_dir: Path, tmp_path: Path
) -> None:
    missing = [f"nvmlDeviceGet{q}{s}" for q in QUERIES for s in ("_v3", "_v2", "")]
    [gpu] = read(lib_dir, tmp_path, missing_symbols=missing)
    assert gpu == {"processes": [], "unknown": "compute processes: Function Not Found"}


def test_a_failing_query_leaves_the_processes_unknown(lib_dir: Path, tmp_path: Path) -> None:
    """Inside a container that lost its device nodes NVML answers "Unknown Error"."""
    [gpu] = read(lib_dir, tmp_path, process_query_error="unknown")
    assert gpu == {"processes": [], "unknown": "compute processes: Unknown Error"}
