"""Tests for the fake NVIDIA driver libraries in tests/fakenvml/.

pynvml (and ctypes) load a driver library once per process, so every check
runs a small Python snippet in a subprocess with LD_LIBRARY_PATH pointing at
the freshly built fake libraries and FAKE_NVML_TOPOLOGY naming a topology.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "fake-nvml-build"
TOPOLOGIES = REPO / "tests" / "topologies"

M40_UUID = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"
GTX1650_UUID = "GPU-1650a1b2-c3d4-4e5f-8a9b-0c1d2e3f4a5b"
MIG_3G_UUID = "MIG-5c8a3f20-1d4b-5e6f-8a9b-0c1d2e3f4a5b"
MIG_2G_UUID = "MIG-9e7d6c5b-4a39-5281-9f0e-1d2c3b4a5968"
A100_MIG_PARENT_UUID = "GPU-a1000000-7e57-4d1a-9c0b-1f2e3d4c5b6a"


def run_build(cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BUILD_SCRIPT)], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture(scope="session")
def lib_dir() -> Path:
    proc = run_build()
    assert proc.returncode == 0, proc.stderr
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert (path / "libnvidia-ml.so.1").is_file()
    assert (path / "libcuda.so.1").is_file()
    return path


def run_snippet(
    lib_dir: Path,
    code: str,
    topology: Path | str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    full_env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"FAKE_NVML_TOPOLOGY", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"}
    }
    full_env["LD_LIBRARY_PATH"] = str(lib_dir)
    if topology is not None:
        full_env["FAKE_NVML_TOPOLOGY"] = str(topology)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def run_json(lib_dir: Path, code: str, topology: Path | str | None = None, **kw: Any) -> Any:
    """Runs a snippet whose last stdout line is JSON, and returns it parsed."""
    proc = run_snippet(lib_dir, code, topology, **kw)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write_topology(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc))
    return path


# Lists every GPU the way a caller of pynvml would see it.
NVML_LIST = """
import json, pynvml as n
n.nvmlInit()
gpus = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    pci = n.nvmlDeviceGetPciInfo(h)
    mem = n.nvmlDeviceGetMemoryInfo(h)
    gpus.append({
        "index": n.nvmlDeviceGetIndex(h),
        "name": n.nvmlDeviceGetName(h),
        "uuid": n.nvmlDeviceGetUUID(h),
        "bus_id": pci.busId,
        "bus_id_legacy": pci.busIdLegacy,
        "domain": pci.domain, "bus": pci.bus, "device": pci.device,
        "pci_device_id": pci.pciDeviceId,
        "total_mib": mem.total >> 20, "used_mib": mem.used >> 20, "free_mib": mem.free >> 20,
        "cc": list(n.nvmlDeviceGetCudaComputeCapability(h)),
        "minor": n.nvmlDeviceGetMinorNumber(h),
        "util": n.nvmlDeviceGetUtilizationRates(h).gpu,
        "persistence": n.nvmlDeviceGetPersistenceMode(h),
        "sm": n.nvmlDeviceGetAttributes(h).multiprocessorCount,
    })
out = {
    "driver": n.nvmlSystemGetDriverVersion(),
    "cuda": n.nvmlSystemGetCudaDriverVersion(),
    "cuda_v2": n.nvmlSystemGetCudaDriverVersion_v2(),
    "nvml": n.nvmlSystemGetNVMLVersion(),
    "gpus": gpus,
}
n.nvmlShutdown()
print(json.dumps(out))
"""


# ---------------------------------------------------------------------------
# NVML: enumeration and identity


def test_three_gpus_enumerate_in_pci_order(lib_dir: Path) -> None:
    out = run_json(lib_dir, NVML_LIST, TOPOLOGIES / "three-gpus-unordered.json")
    assert out["driver"] == "550.54.14"
    assert out["cuda"] == out["cuda_v2"] == 12040
    assert out["nvml"] == "12.550.54.14"
    got = [
        (g["index"], g["name"], g["uuid"], g["bus_id"], g["total_mib"], g["used_mib"], g["cc"])
        for g in out["gpus"]
    ]
    assert got == [
        (
            0,
            "Tesla T4",
            "GPU-3b0f1e2d-3c4b-4a59-8687-9a8b7c6d5e4f",
            "00000000:3B:00.0",
            15360,
            0,
            [7, 5],
        ),
        (
            1,
            "NVIDIA A100 80GB PCIe",
            "GPU-81d4c3b2-a190-4f8e-9d7c-6b5a49382716",
            "00000000:81:00.0",
            81920,
            12288,
            [8, 0],
        ),
        (
            2,
            "NVIDIA GeForce RTX 3090",
            "GPU-c1a2b3c4-d5e6-4f70-8192-a3b4c5d6e7f8",
            "00000000:C1:00.0",
            24576,
            1024,
            [8, 6],
        ),
    ]
    a100 = out["gpus"][1]
    assert a100["free_mib"] == 81920 - 12288
    assert (a100["util"], a100["sm"], a100["minor"], a100["persistence"]) == (87, 108, 1, 1)


def test_pci_info_fields(lib_dir: Path) -> None:
    out = run_json(lib_dir, NVML_LIST, TOPOLOGIES / "three-gpus-unordered.json")
    t4 = out["gpus"][0]
    assert t4["bus_id_legacy"] == "0000:3B:00.0"
    assert (t4["domain"], t4["bus"], t4["device"]) == (0, 0x3B, 0)
    assert t4["pci_device_id"] & 0xFFFF == 0x10DE  # NVIDIA's vendor id


def test_versioned_structs_and_legacy_entry_points(lib_dir: Path) -> None:
    code = """
    import ctypes, json, pynvml as n
    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(1)
    m2 = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
    bad = n.c_nvmlMemory_v2_t(); bad.version = 1
    bad_rc = n._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo_v2")(h, ctypes.byref(bad))
    ext = n.nvmlPciInfoExt_v1_t(); ext.version = n.nvmlPciInfoExt_v1
    n.nvmlDeviceGetPciInfoExt(h, ctypes.byref(ext))
    # The legacy nvmlDeviceGetPciInfo fills the old, shorter struct only.
    legacy = n.nvmlPciInfo_v2_t()
    guard = (ctypes.c_ubyte * 64)(*([0xAB] * 64))
    buf = (ctypes.c_ubyte * (ctypes.sizeof(legacy) + 64))()
    ctypes.memmove(ctypes.addressof(buf) + ctypes.sizeof(legacy), guard, 64)
    rc = n.nvmlLib.nvmlDeviceGetPciInfo(h, ctypes.byref(buf))
    ctypes.memmove(ctypes.byref(legacy), buf, ctypes.sizeof(legacy))
    print(json.dumps({
        "v2": [m2.total >> 20, m2.used >> 20, m2.free >> 20, m2.reserved],
        "bad_rc": bad_rc,
        "ext": [ext.busId, ext.bus, ext.baseClass],
        "legacy": [rc, legacy.busId, legacy.bus],
        "guard_intact": bytes(buf[ctypes.sizeof(legacy):]) == bytes(guard),
        "init_alias": [n.nvmlLib.nvmlInit(), n.nvmlLib.nvmlInit_v2()],
    }))
    """
    out = run_json(lib_dir, code, TOPOLOGIES / "three-gpus-unordered.json")
    assert out["v2"] == [81920, 12288, 81920 - 12288, 0]
    assert out["bad_rc"] == 25  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    assert out["ext"] == ["00000000:81:00.0", 0x81, 3]
    assert out["legacy"] == [0, "0000:81:00.0", 0x81]
    assert out["guard_intact"]
    assert out["init_alias"] == [0, 0]


def test_handle_by_uuid_and_pci_bus_id(lib_dir: Path) -> None:
    code = """
    import json, pynvml as n
    n.nvmlInit()
    def index_or_error(fn, arg):
        try:
            return n.nvmlDeviceGetIndex(fn(arg))
        except n.NVMLError as e:
            return type(e).__name__
    by_uuid = n.nvmlDeviceGetHandleByUUID
    by_pci = n.nvmlDeviceGetHandleByPciBusId
    def by_index(i):
        return n.nvmlDeviceGetHandleByIndex(i)
    print(json.dumps({
        "uuid": index_or_error(by_uuid, "GPU-c1a2b3c4-d5e6-4f70-8192-a3b4c5d6e7f8"),
        "uuid_unknown": index_or_error(by_uuid, "GPU-00000000-0000-0000-0000-000000000000"),
        "pci_long": index_or_error(by_pci, "00000000:81:00.0"),
        "pci_short": index_or_error(by_pci, "0000:c1:00.0"),
        "pci_bare": index_or_error(by_pci, "3b:00.0"),
        "pci_unknown": index_or_error(by_pci, "0000:99:00.0"),
        "pci_garbage": index_or_error(by_pci, "not-a-bus-id"),
        "index_out_of_range": index_or_error(by_index, 3),
    }))
    """
    out = run_json(lib_dir, code, TOPOLOGIES / "three-gpus-unordered.json")
    assert out == {
        "uuid": 2,
        "uuid_unknown": "NVMLError_NotFound",
        "pci_long": 1,
        "pci_short": 2,
        "pci_bare": 0,
        "pci_unknown": "NVMLError_NotFound",
        "pci_garbage": "NVMLError_InvalidArgument",
        "index_out_of_range": "NVMLError_InvalidArgument",
    }


def test_gtx1650_m40_nvml_index_follows_pci(lib_dir: Path) -> None:
    out = run_json(lib_dir, NVML_LIST, TOPOLOGIES / "gtx1650-m40.json")
    assert [g["name"] for g in out["gpus"]] == ["Tesla M40 24GB", "NVIDIA GeForce GTX 1650"]
    assert [g["uuid"] for g in out["gpus"]] == [M40_UUID, GTX1650_UUID]
    assert [g["cc"] for g in out["gpus"]] == [[5, 2], [7, 5]]
    assert [g["persistence"] for g in out["gpus"]] == [1, 0]


@settings(max_examples=15, deadline=None)
@given(
    buses=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 255), st.integers(0, 31)),
        min_size=1,
        max_size=6,
        unique=True,
    ),
    notation=st.sampled_from(
        ["{d:08X}:{b:02X}:{s:02X}.0", "{d:04x}:{b:02x}:{s:02x}.0", "{b:02x}:{s:02X}.0"]
    ),
)
def test_any_listing_order_enumerates_sorted(
    lib_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
    buses: list[tuple[int, int, int]],
    notation: str,
) -> None:
    if "{d" not in notation:
        buses = [(0, b, s) for (_, b, s) in buses]
        buses = list(dict.fromkeys(buses))
    gpus = [
        {
            "uuid": f"GPU-{i:08x}-0000-4000-8000-000000000000",
            "pci_bus_id": notation.format(d=d, b=b, s=s),
        }
        for i, (d, b, s) in enumerate(buses)
    ]
    topo = write_topology(tmp_path_factory.mktemp("prop") / "t.json", {"gpus": gpus})
    out = run_json(lib_dir, NVML_LIST, topo)
    expected = [f"{d:08X}:{b:02X}:{s:02X}.0" for (d, b, s) in sorted(buses)]
    assert [g["bus_id"] for g in out["gpus"]] == expected
    assert [g["index"] for g in out["gpus"]] == list(range(len(buses)))


# ---------------------------------------------------------------------------
# NVML: init, errors, topology lookup


@pytest.mark.parametrize(
    ("init_error", "exception"),
    [
        ("driver_not_loaded", "NVMLError_DriverNotLoaded"),
        ("library_not_found", "NVMLError_LibraryNotFound"),
        ("no_permission", "NVMLError_NoPermission"),
        ("lib_rm_version_mismatch", "NVMLError_LibRmVersionMismatch"),
    ],
)
def test_init_error_raises_matching_pynvml_exception(
    lib_dir: Path, tmp_path: Path, init_error: str, exception: str
) -> None:
    topo = write_topology(tmp_path / "t.json", {"init_error": init_error, "gpus": [{}]})
    code = f"""
    import json, pynvml as n
    try:
        n.nvmlInit()
        print(json.dumps("no error"))
    except n.{exception} as e:
        print(json.dumps([type(e).__name__, str(e)]))
    """
    name, text = run_json(lib_dir, code, topo)
    assert name == exception
    assert text  # pynvml's message for the code


@pytest.mark.parametrize(
    "content",
    [
        '{"gpus": [',
        '{"gpus": [{"memory_total_mib": "lots"}]}',
        '{"init_error": "bogus"}',
        "[1, 2]",
        '{"gpus": [{"error": "on_fire"}]}',
        '{"gpus": [{"pci_bus_id": "0:1:2:3"}]}',
        '{"gpus": [{"pci_bus_id": "01:00.0"}, {"pci_bus_id": "0000:01:00.0"}]}',
    ],
)
def test_malformed_topology_fails_init_with_unknown(
    lib_dir: Path, tmp_path: Path, content: str
) -> None:
    topo = tmp_path / "bad.json"
    topo.write_text(content)
    code = """
    import json, pynvml as n
    try:
        n.nvmlInit()
        print(json.dumps("no error"))
    except n.NVMLError_Unknown as e:
        print(json.dumps(type(e).__name__))
    """
    proc = run_snippet(lib_dir, code, topo)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == "NVMLError_Unknown"
    assert "malformed topology" in proc.stderr and str(topo) in proc.stderr


def test_missing_topology_file_named_by_env_fails(lib_dir: Path, tmp_path: Path) -> None:
    code = """
    import json, pynvml as n
    try:
        n.nvmlInit()
    except n.NVMLError_Unknown:
        print(json.dumps("unknown"))
    """
    proc = run_snippet(lib_dir, code, tmp_path / "nope.json")
    assert proc.stdout.strip() == '"unknown"'
    assert "cannot open" in proc.stderr


def test_no_topology_means_zero_gpus(lib_dir: Path) -> None:
    out = run_json(lib_dir, NVML_LIST, topology=None)
    assert out["gpus"] == []
    assert out["driver"] == "550.54.14"


def test_topology_beside_the_library(lib_dir: Path, tmp_path: Path) -> None:
    shutil.copy(lib_dir / "libnvidia-ml.so.1", tmp_path)
    shutil.copy(TOPOLOGIES / "gtx1650-m40.json", tmp_path / "fake-nvml-topology.json")
    out = run_json(tmp_path, NVML_LIST, topology=None)
    assert [g["uuid"] for g in out["gpus"]] == [M40_UUID, GTX1650_UUID]
    assert out["driver"] == "535.183.01"
    # FAKE_NVML_TOPOLOGY still wins over the file beside the library.
    out = run_json(tmp_path, NVML_LIST, TOPOLOGIES / "three-gpus-unordered.json")
    assert len(out["gpus"]) == 3


def test_reinit_rereads_topology_only_from_refcount_zero(lib_dir: Path, tmp_path: Path) -> None:
    topo = tmp_path / "t.json"
    code = f"""
    import json, pathlib, pynvml as n
    topo = pathlib.Path({str(topo)!r})
    def write(count):
        topo.write_text(json.dumps({{"gpus": [{{}} for _ in range(count)]}}))
    counts = []
    write(1); n.nvmlInit(); counts.append(n.nvmlDeviceGetCount())
    write(2); n.nvmlInit(); counts.append(n.nvmlDeviceGetCount())  # nested: no re-read
    n.nvmlShutdown(); counts.append(n.nvmlDeviceGetCount())
    n.nvmlShutdown()
    try:
        n.nvmlDeviceGetCount()
    except n.NVMLError_Uninitialized:
        counts.append("uninitialized")
    try:
        n.nvmlShutdown()
    except n.NVMLError_Uninitialized:
        counts.append("double shutdown")
    write(3); n.nvmlInit(); counts.append(n.nvmlDeviceGetCount())
    print(json.dumps(counts))
    """
    assert run_json(lib_dir, code, topo) == [1, 1, 1, "uninitialized", "double shutdown", 3]


def test_error_strings(lib_dir: Path) -> None:
    code = """
    import json, pynvml as n
    n.nvmlInit()
    print(json.dumps([n.nvmlErrorString(c) for c in (0, 6, 9, 15, 999, 12345)]))
    """
    out = run_json(lib_dir, code)
    assert out == [
        "Success",
        "Not Found",
        "Driver Not Loaded",
        "GPU is lost",
        "Unknown Error",
        "Unknown Error",
    ]


# ---------------------------------------------------------------------------
# NVML: MIG, processes, lost GPUs


def test_mig_devices(lib_dir: Path) -> None:
    code = """
    import json, pynvml as n
    n.nvmlInit()
    def err(fn, *args):
        try:
            fn(*args)
            return "ok"
        except n.NVMLError as e:
            return type(e).__name__
    a100, a10 = n.nvmlDeviceGetHandleByIndex(0), n.nvmlDeviceGetHandleByIndex(1)
    migs = []
    for i in range(n.nvmlDeviceGetMaxMigDeviceCount(a100)):
        try:
            m = n.nvmlDeviceGetMigDeviceHandleByIndex(a100, i)
        except n.NVMLError_NotFound:
            continue
        parent = n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
        migs.append({
            "slot": i,
            "uuid": n.nvmlDeviceGetUUID(m),
            "name": n.nvmlDeviceGetName(m),
            "total_mib": n.nvmlDeviceGetMemoryInfo(m).total >> 20,
            "used_mib": n.nvmlDeviceGetMemoryInfo(m).used >> 20,
            "is_mig": n.nvmlDeviceIsMigDeviceHandle(m).value,
            "parent": n.nvmlDeviceGetUUID(parent),
            "gi": n.nvmlDeviceGetGpuInstanceId(m),
            "procs": [(p.pid, p.usedGpuMemory >> 20, p.gpuInstanceId)
                      for p in n.nvmlDeviceGetComputeRunningProcesses(m)],
            "index_on_mig": err(n.nvmlDeviceGetIndex, m),
        })
    by_uuid = n.nvmlDeviceGetHandleByUUID(MIG2_UUID)
    print(json.dumps({
        "a100_mode": n.nvmlDeviceGetMigMode(a100),
        "a100_max": n.nvmlDeviceGetMaxMigDeviceCount(a100),
        "a100_is_mig": n.nvmlDeviceIsMigDeviceHandle(a100).value,
        "a100_procs": [p.pid for p in n.nvmlDeviceGetComputeRunningProcesses(a100)],
        "a100_slot_7": err(n.nvmlDeviceGetMigDeviceHandleByIndex, a100, 7),
        "a10_mode": n.nvmlDeviceGetMigMode(a10),
        "a10_max": n.nvmlDeviceGetMaxMigDeviceCount(a10),
        "migs": migs,
        "by_uuid": [n.nvmlDeviceGetName(by_uuid), n.nvmlDeviceIsMigDeviceHandle(by_uuid).value],
    }))
    """.replace("MIG2_UUID", repr(MIG_2G_UUID))
    out = run_json(lib_dir, code, TOPOLOGIES / "mig.json")
    assert out["a100_mode"] == [1, 1]
    assert out["a100_max"] == 7
    assert out["a100_is_mig"] == 0
    assert out["a100_procs"] == [5151]
    assert out["a100_slot_7"] == "NVMLError_InvalidArgument"
    assert out["a10_mode"] == [0, 0]
    assert out["a10_max"] == 0
    assert out["migs"] == [
        {
            "slot": 0,
            "uuid": MIG_3G_UUID,
            "name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
            "total_mib": 19968,
            "used_mib": 2048,
            "is_mig": 1,
            "parent": A100_MIG_PARENT_UUID,
            "gi": 1,
            "procs": [[5151, 2000, 1]],
            "index_on_mig": "NVMLError_NotSupported",
        },
        {
            "slot": 1,
            "uuid": MIG_2G_UUID,
            "name": "NVIDIA A100-SXM4-40GB MIG 2g.10gb",
            "total_mib": 9856,
            "used_mib": 0,
            "is_mig": 1,
            "parent": A100_MIG_PARENT_UUID,
            "gi": 5,
            "procs": [],
            "index_on_mig": "NVMLError_NotSupported",
        },
    ]
    assert out["by_uuid"] == ["NVIDIA A100-SXM4-40GB MIG 2g.10gb", 1]


def test_mig_not_supported_and_mig_devices_hidden_when_mode_off(
    lib_dir: Path, tmp_path: Path
) -> None:
    topo = write_topology(
        tmp_path / "t.json",
        {
            "gpus": [
                {"mig_supported": False},
                {
                    "mig_mode": False,
                    "mig_devices": [{"uuid": "MIG-11111111-2222-5333-8444-555555555555"}],
                },
            ]
        },
    )
    code = """
    import json, pynvml as n
    n.nvmlInit()
    out = []
    for call in (lambda: n.nvmlDeviceGetMigMode(n.nvmlDeviceGetHandleByIndex(0)),
                 lambda: n.nvmlDeviceGetHandleByUUID("MIG-11111111-2222-5333-8444-555555555555")):
        try:
            out.append(call())
        except n.NVMLError as e:
            out.append(type(e).__name__)
    print(json.dumps(out))
    """
    assert run_json(lib_dir, code, topo) == ["NVMLError_NotSupported", "NVMLError_NotFound"]


def test_running_processes(lib_dir: Path) -> None:
    code = """
    import json, pynvml as n
    n.nvmlInit()
    out = []
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        out.append({
            "v3": [(p.pid, p.usedGpuMemory >> 20, p.gpuInstanceId)
                   for p in n.nvmlDeviceGetComputeRunningProcesses(h)],
            "v2": [(p.pid, p.usedGpuMemory >> 20)
                   for p in n.nvmlDeviceGetComputeRunningProcesses_v2(h)],
            "graphics": n.nvmlDeviceGetGraphicsRunningProcesses(h),
        })
    print(json.dumps({"gpus": out, "name": n.nvmlSystemGetProcessName(4242)}))
    """
    out = run_json(lib_dir, code, TOPOLOGIES / "three-gpus-unordered.json")
    no_instance = 0xFFFFFFFF
    assert out["gpus"] == [
        {"v3": [], "v2": [], "graphics": []},
        {
            "v3": [[4242, 8192, no_instance], [4343, 4096, no_instance]],
            "v2": [[4242, 8192], [4343, 4096]],
            "graphics": [],
        },
        {"v3": [], "v2": [], "graphics": []},
    ]
    assert out["name"] == "python3"


def test_process_size_query_protocol(lib_dir: Path) -> None:
    """pynvml first asks with count 0 and NULL; the driver answers
    INSUFFICIENT_SIZE and the count (SUCCESS when there is nothing)."""
    code = """
    import ctypes, json, pynvml as n
    n.nvmlInit()
    fn = n.nvmlLib.nvmlDeviceGetComputeRunningProcesses_v3
    out = []
    for i in (0, 1):
        count = ctypes.c_uint(0)
        rc = fn(n.nvmlDeviceGetHandleByIndex(i), ctypes.byref(count), None)
        out.append([rc, count.value])
    count = ctypes.c_uint(1)
    procs = (n.c_nvmlProcessInfo_v3_t * 1)()
    out.append([fn(n.nvmlDeviceGetHandleByIndex(1), ctypes.byref(count), procs), count.value])
    print(json.dumps(out))
    """
    out = run_json(lib_dir, code, TOPOLOGIES / "three-gpus-unordered.json")
    assert out == [[0, 0], [7, 2], [7, 2]]


def test_lost_gpu_fails_queries_but_others_work(lib_dir: Path) -> None:
    code = """
    import json, pynvml as n
    n.nvmlInit()
    def call(fn, *args):
        try:
            r = fn(*args)
            return r if isinstance(r, (str, int)) else "ok"
        except n.NVMLError as e:
            return type(e).__name__
    lost = n.nvmlDeviceGetHandleByIndex(0)
    good = n.nvmlDeviceGetHandleByIndex(1)
    queries = [n.nvmlDeviceGetName, n.nvmlDeviceGetUUID, n.nvmlDeviceGetMemoryInfo,
               n.nvmlDeviceGetPciInfo, n.nvmlDeviceGetCudaComputeCapability,
               n.nvmlDeviceGetIndex, n.nvmlDeviceGetComputeRunningProcesses,
               n.nvmlDeviceGetUtilizationRates, n.nvmlDeviceGetMigMode]
    print(json.dumps({
        "count": n.nvmlDeviceGetCount(),
        "lost": sorted({call(q, lost) for q in queries}),
        "good": [call(q, good) for q in queries[:2]],
        "lost_by_uuid": call(n.nvmlDeviceGetHandleByUUID,
                             "GPU-0a0a0a0a-1111-4222-8333-444455556666"),
        "lost_by_pci": call(n.nvmlDeviceGetHandleByPciBusId, "00000000:1A:00.0"),
    }))
    """
    out = run_json(lib_dir, code, TOPOLOGIES / "lost.json")
    assert out["count"] == 2
    assert out["lost"] == ["NVMLError_GpuIsLost"]
    assert out["good"] == ["Tesla V100-SXM2-16GB", "GPU-0b0b0b0b-7777-4888-9999-aaaabbbbcccc"]
    assert out["lost_by_uuid"] == "NVMLError_GpuIsLost"
    assert out["lost_by_pci"] == "ok"


# ---------------------------------------------------------------------------
# Build script


def test_build_script_is_idempotent_and_cwd_independent(lib_dir: Path, tmp_path: Path) -> None:
    start = time.monotonic()
    proc = run_build(cwd=tmp_path)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(lib_dir)
    assert "up to date" in proc.stderr
    assert elapsed < 10


def test_build_script_rebuilds_into_new_cache_dir(tmp_path: Path) -> None:
    env = {**os.environ, "DRGPU_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [str(BUILD_SCRIPT)], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr
    out = Path(proc.stdout.strip().splitlines()[-1])
    assert out.parent == tmp_path / "cache" / "fakenvml"
    assert {p.name for p in out.iterdir()} >= {"libnvidia-ml.so.1", "libcuda.so.1"}
    assert "building" in proc.stderr


# ---------------------------------------------------------------------------
# CUDA driver API (libcuda.so.1)

# Lists the CUDA devices the way a CUDA program would enumerate them.
CUDA_LIST = """
import ctypes, json
cu = ctypes.CDLL("libcuda.so.1")
out = {}
count = ctypes.c_int(-1)
out["count_before_init"] = [cu.cuDeviceGetCount(ctypes.byref(count)), count.value]
version = ctypes.c_int()
out["version"] = [cu.cuDriverGetVersion(ctypes.byref(version)), version.value]
out["init"] = cu.cuInit(0)
out["count_rc"] = cu.cuDeviceGetCount(ctypes.byref(count))
out["count"] = count.value
devices = []
for i in range(count.value):
    dev = ctypes.c_int()
    assert cu.cuDeviceGet(ctypes.byref(dev), i) == 0
    name = ctypes.create_string_buffer(256)
    bus = ctypes.create_string_buffer(32)
    mem = ctypes.c_size_t()
    uuid, uuid_v1 = (ctypes.c_ubyte * 16)(), (ctypes.c_ubyte * 16)()
    assert cu.cuDeviceGetName(name, 256, dev) == 0
    assert cu.cuDeviceGetPCIBusId(bus, 32, dev) == 0
    assert cu.cuDeviceTotalMem_v2(ctypes.byref(mem), dev) == 0
    assert cu.cuDeviceGetUuid_v2(uuid, dev) == 0
    assert cu.cuDeviceGetUuid(uuid_v1, dev) == 0
    attrs = {}
    for attr in (16, 33, 34, 50, 75, 76):
        value = ctypes.c_int()
        assert cu.cuDeviceGetAttribute(ctypes.byref(value), attr, dev) == 0
        attrs[attr] = value.value
    devices.append({
        "name": name.value.decode(), "bus": bus.value.decode(), "mem_mib": mem.value >> 20,
        "uuid": bytes(uuid).hex(), "uuid_v1": bytes(uuid_v1).hex(),
        "cc": [attrs[75], attrs[76]], "sm": attrs[16],
        "pci": [attrs[50], attrs[33], attrs[34]],
    })
out["devices"] = devices
bad = ctypes.c_int()
out["bad_ordinal"] = cu.cuDeviceGet(ctypes.byref(bad), count.value)
print(json.dumps(out))
"""


def uuid_hex(uuid: str) -> str:
    return uuid.split("-", 1)[1].replace("-", "")


def cuda_names(lib_dir: Path, topology: Path | None, **env: str) -> list[str]:
    out = run_json(lib_dir, CUDA_LIST, topology, env=env)
    return [d["name"] for d in out["devices"]]


def test_cuda_fastest_first_differs_from_nvml_index(lib_dir: Path) -> None:
    topo = TOPOLOGIES / "gtx1650-m40.json"
    out = run_json(lib_dir, CUDA_LIST, topo)
    assert out["count_before_init"] == [3, 0]  # CUDA_ERROR_NOT_INITIALIZED
    assert out["version"] == [0, 12020]
    assert (out["init"], out["count_rc"], out["count"]) == (0, 0, 2)
    gtx, m40 = out["devices"]
    assert gtx == {
        "name": "NVIDIA GeForce GTX 1650",
        "bus": "0000:81:00.0",
        "mem_mib": 4096,
        "uuid": uuid_hex(GTX1650_UUID),
        "uuid_v1": uuid_hex(GTX1650_UUID),
        "cc": [7, 5],
        "sm": 14,
        "pci": [0, 0x81, 0],
    }
    assert m40["name"] == "Tesla M40 24GB" and m40["bus"] == "0000:03:00.0"
    assert out["bad_ordinal"] == 101  # CUDA_ERROR_INVALID_DEVICE
    nvml = run_json(lib_dir, NVML_LIST, topo)
    assert nvml["gpus"][0]["name"] == "Tesla M40 24GB"


def test_cuda_pci_bus_id_order_matches_nvml(lib_dir: Path) -> None:
    topo = TOPOLOGIES / "gtx1650-m40.json"
    cuda = run_json(lib_dir, CUDA_LIST, topo, env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    nvml = run_json(lib_dir, NVML_LIST, topo)
    assert [d["uuid"] for d in cuda["devices"]] == [uuid_hex(g["uuid"]) for g in nvml["gpus"]]


def test_cuda_fastest_first_tie_breaks(lib_dir: Path, tmp_path: Path) -> None:
    specs = [  # name, bus, compute capability, SM count
        ("c", "04:00.0", [8, 6], 28),
        ("b", "03:00.0", [8, 6], 82),
        ("d", "02:00.0", [8, 6], 28),
        ("a", "05:00.0", [9, 0], 1),
        ("e", "01:00.0", [8, 0], 108),
    ]
    gpus = [
        {"name": name, "pci_bus_id": bus, "compute_capability": cc, "multiprocessor_count": sm}
        for name, bus, cc, sm in specs
    ]
    topo = write_topology(tmp_path / "t.json", {"gpus": gpus})
    assert cuda_names(lib_dir, topo) == ["a", "b", "d", "c", "e"]
    assert cuda_names(lib_dir, topo, CUDA_DEVICE_ORDER="PCI_BUS_ID") == ["e", "d", "b", "c", "a"]


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (M40_UUID, ["Tesla M40 24GB"]),
        ("GPU-6f0c,GPU-1650", ["Tesla M40 24GB", "NVIDIA GeForce GTX 1650"]),
        ("1,0", ["Tesla M40 24GB", "NVIDIA GeForce GTX 1650"]),
        ("0,7,1", ["NVIDIA GeForce GTX 1650"]),  # stops at the invalid index
        ("1,bogus,0", ["Tesla M40 24GB"]),
        ("0,0", ["NVIDIA GeForce GTX 1650"]),  # a repeat ends the list
        ("GPU-", []),  # ambiguous prefix
        ("GPU-ffffffff", []),
    ],
)
def test_cuda_visible_devices(lib_dir: Path, visible: str, expected: list[str]) -> None:
    topo = TOPOLOGIES / "gtx1650-m40.json"
    out = run_json(lib_dir, CUDA_LIST, topo, env={"CUDA_VISIBLE_DEVICES": visible})
    assert [d["name"] for d in out["devices"]] == expected
    assert out["init"] == (0 if expected else 100)


def test_cuda_visible_devices_empty_hides_everything(lib_dir: Path) -> None:
    out = run_json(
        lib_dir, CUDA_LIST, TOPOLOGIES / "gtx1650-m40.json", env={"CUDA_VISIBLE_DEVICES": ""}
    )
    assert (out["init"], out["count_rc"], out["count"]) == (100, 100, 0)


def test_cuda_mig_devices(lib_dir: Path) -> None:
    topo = TOPOLOGIES / "mig.json"
    out = run_json(lib_dir, CUDA_LIST, topo)
    # The MIG-enabled A100 is replaced by its MIG devices; the A10 (cc 8.6) is fastest.
    assert [d["name"] for d in out["devices"]] == [
        "NVIDIA A10",
        "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
        "NVIDIA A100-SXM4-40GB MIG 2g.10gb",
    ]
    out = run_json(lib_dir, CUDA_LIST, topo, env={"CUDA_VISIBLE_DEVICES": MIG_2G_UUID[:12]})
    (mig,) = out["devices"]
    assert mig["mem_mib"] == 9856 and mig["sm"] == 28 and mig["bus"] == "0000:07:00.0"
    assert mig["uuid"] == uuid_hex(MIG_2G_UUID)
    assert mig["uuid_v1"] == uuid_hex(A100_MIG_PARENT_UUID)
    # The MIG-enabled parent itself is not a CUDA device.
    out = run_json(lib_dir, CUDA_LIST, topo, env={"CUDA_VISIBLE_DEVICES": A100_MIG_PARENT_UUID})
    assert (out["init"], out["devices"]) == (100, [])


def test_cuda_skips_lost_gpus(lib_dir: Path) -> None:
    out = run_json(lib_dir, CUDA_LIST, TOPOLOGIES / "lost.json")
    assert [d["bus"] for d in out["devices"]] == ["0000:1B:00.0"]


@pytest.mark.parametrize(
    ("init_error", "code", "name"),
    [
        ("driver_not_loaded", 100, "CUDA_ERROR_NO_DEVICE"),
        ("library_not_found", 34, "CUDA_ERROR_STUB_LIBRARY"),
        ("no_permission", 304, "CUDA_ERROR_OPERATING_SYSTEM"),
        ("lib_rm_version_mismatch", 803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"),
        (None, 100, "CUDA_ERROR_NO_DEVICE"),  # a driver without GPUs
    ],
)
def test_cuda_init_errors(
    lib_dir: Path, tmp_path: Path, init_error: str | None, code: int, name: str
) -> None:
    gpus: list[dict[str, Any]] = [{}] if init_error else []
    topo = write_topology(tmp_path / "t.json", {"init_error": init_error, "gpus": gpus})
    snippet = """
    import ctypes, json
    cu = ctypes.CDLL("libcuda.so.1")
    rc = cu.cuInit(0)
    name, text = ctypes.c_char_p(), ctypes.c_char_p()
    cu.cuGetErrorName(rc, ctypes.byref(name))
    cu.cuGetErrorString(rc, ctypes.byref(text))
    count = ctypes.c_int(-1)
    print(json.dumps([rc, cu.cuInit(0), name.value.decode(), text.value.decode(),
                      cu.cuDeviceGetCount(ctypes.byref(count)), count.value]))
    """
    rc, again, got_name, text, count_rc, count = run_json(lib_dir, snippet, topo)
    assert (rc, again, got_name, count_rc, count) == (code, code, name, code, 0)
    assert text


def test_cuda_malformed_topology(lib_dir: Path, tmp_path: Path) -> None:
    topo = tmp_path / "bad.json"
    topo.write_text("{")
    snippet = """
    import ctypes
    print(ctypes.CDLL("libcuda.so.1").cuInit(0))
    """
    proc = run_snippet(lib_dir, snippet, topo)
    assert proc.stdout.strip() == "999"
    assert "malformed topology" in proc.stderr


def test_cuda_topology_beside_the_library(lib_dir: Path, tmp_path: Path) -> None:
    shutil.copy(lib_dir / "libcuda.so.1", tmp_path)
    shutil.copy(TOPOLOGIES / "gtx1650-m40.json", tmp_path / "fake-nvml-topology.json")
    assert cuda_names(tmp_path, None) == ["NVIDIA GeForce GTX 1650", "Tesla M40 24GB"]


def test_nvitop_runs_on_the_fake_without_errors(lib_dir: Path) -> None:
    """nvitop (bench/bench_watch.py's baseline) finds every NVML function it calls."""
    nvitop = Path(sys.executable).parent / "nvitop"
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(lib_dir),
        "FAKE_NVML_TOPOLOGY": str(TOPOLOGIES / "gtx1650-m40.json"),
    }
    done = subprocess.run(
        [str(nvitop), "--once"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "ERROR" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "Tesla M40 24GB" in done.stdout and "GeForce GTX 1650" in done.stdout
    assert "Driver Version: 535.183.01" in done.stdout


def test_sensors_and_modes_follow_utilization(lib_dir: Path, tmp_path: Path) -> None:
    topology = tmp_path / "busy.json"
    topology.write_text(json.dumps({"gpus": [{"utilization_gpu_percent": 80}, {}]}))
    code = """
        import json, pynvml as n
        n.nvmlInit()
        out = []
        for i in range(2):
            h = n.nvmlDeviceGetHandleByIndex(i)
            out.append([
                n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
                n.nvmlDeviceGetFanSpeed(h),
                n.nvmlDeviceGetPowerUsage(h),
                n.nvmlDeviceGetPowerManagementLimit(h),
                n.nvmlDeviceGetPerformanceState(h),
                n.nvmlDeviceGetComputeMode(h),
                n.nvmlDeviceGetDisplayMode(h),
                n.nvmlDeviceGetEncoderUtilization(h)[0],
            ])
        try:
            n.nvmlDeviceGetTotalEccErrors(h, 0, 1)
        except n.NVMLError_NotSupported:
            out.append("ecc not supported")
        print(json.dumps(out))
    """
    done = run_snippet(lib_dir, code, topology)
    assert done.returncode == 0, done.stderr
    busy, idle, ecc = json.loads(done.stdout)
    assert busy == [75, 70, 180000, 250000, 0, 0, 0, 0]
    assert idle == [35, 30, 20000, 250000, 8, 0, 0, 0]
    assert ecc == "ecc not supported"


def test_temperature_and_power_from_the_topology(lib_dir: Path, tmp_path: Path) -> None:
    topology = tmp_path / "sensors.json"
    gpus = [{"temperature_c": 81, "power_w": 230}, {"sensors_supported": False}]
    topology.write_text(json.dumps({"gpus": gpus}))
    code = """
        import json, pynvml as n
        n.nvmlInit()
        out = []
        for i in range(2):
            h = n.nvmlDeviceGetHandleByIndex(i)
            try:
                out.append([n.nvmlDeviceGetTemperature(h, 0), n.nvmlDeviceGetPowerUsage(h)])
            except n.NVMLError_NotSupported:
                out.append("not supported")
        print(json.dumps(out))
    """
    assert run_json(lib_dir, code, topology) == [[81, 230000], "not supported"]


def test_reload_serves_a_changed_file_to_an_open_session(lib_dir: Path, tmp_path: Path) -> None:
    topo = tmp_path / "t.json"
    code = f"""
    import json, os, pathlib, pynvml as n
    topo = pathlib.Path({str(topo)!r})
    def write(doc, stamp):
        topo.write_text(json.dumps(doc))
        os.utime(topo, ns=(stamp, stamp))
    seen = []
    def count():
        try:
            seen.append(n.nvmlDeviceGetCount())
        except n.NVMLError as exc:
            seen.append(type(exc).__name__)
    write({{"gpus": [{{}}]}}, 10**18); n.nvmlInit(); count()
    write({{"gpus": [{{}}, {{}}]}}, 2 * 10**18); count()
    write({{"init_error": "driver_not_loaded"}}, 3 * 10**18); count(); count()
    write({{"gpus": [{{}}, {{}}, {{}}]}}, 4 * 10**18); count()
    print(json.dumps(seen))
    """
    seen = run_json(lib_dir, code, topo, env={"FAKE_NVML_RELOAD": "1"})
    assert seen == [1, 2, "NVMLError_DriverNotLoaded", "NVMLError_DriverNotLoaded", 3]
    # Without FAKE_NVML_RELOAD an open session keeps what it read.
    assert run_json(lib_dir, code, topo) == [1, 1, 1, 1, 1]
