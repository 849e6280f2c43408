"""What a container really sees: NVML, the CUDA driver and, on request, the frameworks.

One file of the standard library only, run as a plain script by any python3 >= 3.8 in any
image; docs/probe.md tells its command line, what it reports, the expectations and the exit
codes. drgpu imports it (core takes its PCI bus id, CUDA version and CUDA-to-NVML rules) and
runs its source in containers (`python3 -c LAUNCHER`, the source in DRGPU_PROBE), so it must
never import drgpu. Trouble with a GPU or a library is a finding in the report, never a crash.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ctypes
    from collections.abc import Callable, Sequence
    from typing import NoReturn

    # The report is plain JSON-able dicts (see docs/probe.md for the schema). The aliases
    # exist for the type checker only, so that Python 3.8 never evaluates `dict[...]`.
    Report = dict[str, Any]
    Section = dict[str, Any]
    Device = dict[str, Any]

SCHEMA_VERSION = 1

EXIT_OK = 0
EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
EXIT_MISMATCH = 6

# How drgpu runs this probe in a container: the source in the variable, run by `python3 -c`
SOURCE_VARIABLE = "DRGPU_PROBE"
LAUNCHER = f"import os; exec(os.environ[{SOURCE_VARIABLE!r}])"
NVML_LIBRARY = "libnvidia-ml.so.1"
CUDA_LIBRARY = "libcuda.so.1"
ENVIRONMENT_VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "DOCKER_RESOURCE_NVIDIA-GPU",  # a Swarm task's GPUs the engine chose (generic resources)
)
_FRAMEWORK_ALIASES = {
    "torch": "torch",
    "pytorch": "torch",
    "tensorflow": "tensorflow",
    "tf": "tensorflow",
}
DEFAULT_FRAMEWORK_TIMEOUT_S = 120.0
MATMUL_SIZE = 256

_MIB = 1024 * 1024

# NVML return codes (nvml.h)
_NVML_ERROR_NOT_SUPPORTED = 3
_NVML_ERROR_FUNCTION_NOT_FOUND = 13
_NVML_ERROR_GPU_IS_LOST = 15
_NVML_INIT_FLAG_NO_GPUS = 1
_NVML_DEVICE_MIG_ENABLE = 1
_NO_GPU_VALUES = ("", "void", "none")  # NVIDIA_VISIBLE_DEVICES values that give no GPU
_PCI_BUS_ID = re.compile(  # [domain:]bus:device.function
    r"(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])"
)

# CUDA driver API (cuda.h)
_CUDA_SUCCESS = 0
_CUDA_ERROR_NO_DEVICE = 100
_CU_COMPUTE_CAPABILITY = (75, 76)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, _MINOR
_CUDA_ERROR_NAMES = {
    1: "CUDA_ERROR_INVALID_VALUE",
    2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    4: "CUDA_ERROR_DEINITIALIZED",
    34: "CUDA_ERROR_STUB_LIBRARY",
    46: "CUDA_ERROR_DEVICE_UNAVAILABLE",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    304: "CUDA_ERROR_OPERATING_SYSTEM",
    800: "CUDA_ERROR_NOT_PERMITTED",
    801: "CUDA_ERROR_NOT_SUPPORTED",
    802: "CUDA_ERROR_SYSTEM_NOT_READY",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    999: "CUDA_ERROR_UNKNOWN",
}


class _CallError(Exception):
    """A library call that returned an error code (or does not exist: code None)."""

    def __init__(self, function: str, code: int | None, message: str) -> None:
        super().__init__(f"{function}: {message}")
        self.function = function
        self.code = code


def uuid_key(uuid: str) -> str:
    """A comparable key: the 32 hex digits of a GPU-/MIG- UUID, else the lowered text."""
    text = uuid.strip().lower()
    digits = re.sub("^(gpu|mig)-", "", text).replace("-", "")
    return digits if re.fullmatch("[0-9a-f]{32}", digits) else text


def normalize_pci_bus_id(text: str) -> str | None:
    """NVML's spelling `00000000:81:00.0` of `0000:81:00.0`, `81:00.0`...; None if not one."""
    match = _PCI_BUS_ID.fullmatch(text.strip())
    if match is None:
        return None
    domain, bus, device, function = (int(part or "0", 16) for part in match.groups())
    return f"{domain:08X}:{bus:02X}:{device:02X}.{function}"


def _pci_bus_id(text: str) -> str:
    """A library's PCI bus id in NVML's spelling (as given when it is none)."""
    return normalize_pci_bus_id(text) or text


def format_cuda_version(version: int | None) -> str | None:
    """12040 -> '12.4'."""
    return None if version is None else f"{version // 1000}.{(version % 1000) // 10}"


def parse_frameworks(text: str) -> list[str]:
    """`torch,tensorflow` -> canonical names; ValueError for an unknown one."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    for item in items:
        if item.lower() not in _FRAMEWORK_ALIASES:
            raise ValueError(f"unknown framework {item!r} (choose from torch, tensorflow)")
    return list(dict.fromkeys(_FRAMEWORK_ALIASES[item.lower()] for item in items))


# NVML through ctypes
class _Library:
    """A C library whose calls return 0 on success, else an error code `describe` names."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    describe: Callable[[int], str]  # the text of an error code

    def call(self, names: str | tuple[str, ...], *args: Any) -> None:
        """Calls `names` (a tuple: the first of them the library exports)."""
        names = (names,) if isinstance(names, str) else names
        name = next((n for n in names[:-1] if hasattr(self.lib, n)), names[-1])
        try:
            fn = getattr(self.lib, name)
        except AttributeError:
            raise _CallError(name, None, "function not found in the library") from None
        code = int(fn(*args))
        if code != 0:  # NVML_SUCCESS, CUDA_SUCCESS
            raise _CallError(name, code, self.describe(code))

    def ints(self, names: str | tuple[str, ...], *args: Any, count: int = 1) -> list[int]:
        """Calls `names` with `args`, then `count` pointers to ints: the ints it wrote."""
        values = [ctypes.c_int() for _ in range(count)]
        self.call(names, *args, *map(ctypes.byref, values))
        return [int(value.value) for value in values]


class _Nvml(_Library):
    def describe(self, code: int) -> str:
        text = None
        with contextlib.suppress(AttributeError, OSError):  # a stub library may lack it
            fn = self.lib.nvmlErrorString
            fn.restype = ctypes.c_char_p
            text = fn(ctypes.c_int(code))
        return text.decode("utf-8", "replace") if text else f"NVML error {code}"

    def text(self, name: str, *args: Any) -> str:
        buf = ctypes.create_string_buffer(96)
        self.call(name, *args, buf, ctypes.c_uint(96))
        return buf.value.decode("utf-8", "replace")


def _unsupported(exc: _CallError) -> bool:
    return exc.code in (None, _NVML_ERROR_NOT_SUPPORTED, _NVML_ERROR_FUNCTION_NOT_FOUND)


def _opened(library: str, before: Sequence[str], after: Sequence[str]) -> tuple[Section, Any]:
    """A section of `library` with nothing known yet (its own keys `before` the device
    count and `after` the devices), and the library loaded (None: its `error` says why)."""
    keys = ("error", "error_code", "driver_version", *before, "device_count")
    section: Section = {"library": library, "loaded": False, "available": False}
    section.update({**dict.fromkeys(keys), "devices": [], **dict.fromkeys(after)})
    global ctypes  # noqa: PLW0603 (here, not at import: core imports this module for its rules)
    import ctypes

    try:
        lib = ctypes.CDLL(library)
    except OSError as exc:
        section["error"] = f"cannot load {library}: {exc}"
        return section, None
    section["loaded"] = True
    return section, lib


def probe_nvml(processes: bool = False) -> Section:
    """What NVML shows (with each GPU's `processes`); failures are recorded, never raised."""
    section, lib = _opened(NVML_LIBRARY, ["cuda_driver_version"], [])
    if lib is None:
        return section
    nvml = _Nvml(lib)
    try:
        if hasattr(lib, "nvmlInitWithFlags"):
            nvml.call("nvmlInitWithFlags", ctypes.c_uint(_NVML_INIT_FLAG_NO_GPUS))
        else:
            nvml.call(("nvmlInit_v2", "nvmlInit"))
        with contextlib.suppress(_CallError):
            section["driver_version"] = nvml.text("nvmlSystemGetDriverVersion")
        with contextlib.suppress(_CallError):
            cuda_version = ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion")
            section["cuda_driver_version"] = nvml.ints(cuda_version)[0]
        [count] = nvml.ints(("nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"))
        section.update(available=True, device_count=count)
        section["devices"] = [_nvml_device(nvml, index, processes) for index in range(count)]
    except _CallError as exc:  # nvmlInit's or the count's (a device's failures are its own)
        section.update(error=str(exc), error_code=exc.code)
    finally:
        with contextlib.suppress(_CallError):  # after a failed nvmlInit too: harmless
            nvml.call("nvmlShutdown")
    return section


def _nvml_device(nvml: _Nvml, index: int, processes: bool) -> Device:
    handle = ctypes.c_void_p()
    fields: dict[str, Callable[[], Any]] = {
        "uuid": lambda: nvml.text("nvmlDeviceGetUUID", handle),
        "name": lambda: nvml.text("nvmlDeviceGetName", handle),
        "pci_bus_id": lambda: _nvml_pci_bus_id(nvml, handle),
        "memory_total_mib": lambda: _nvml_memory(nvml, handle)[0],
        "memory_used_mib": lambda: _nvml_memory(nvml, handle)[1],
        "compute_capability": lambda: nvml.ints(
            "nvmlDeviceGetCudaComputeCapability", handle, count=2
        ),
        "mig_mode": lambda: _nvml_mig_mode(nvml, handle),
        "mig_devices": lambda: _nvml_mig_devices(nvml, handle) if device["mig_mode"] else [],
    }
    device: Device = {"index": index, **dict.fromkeys(fields), "mig_devices": [], "error": None}
    if processes:
        fields["processes"] = lambda: _nvml_processes(nvml, handle)
    by_index = ("nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex")
    return _fill(
        device,
        lambda: nvml.call(by_index, ctypes.c_uint(index), ctypes.byref(handle)),
        fields,
        _unsupported,
    )


def _fill(
    device: Device,
    get_handle: Callable[[], None],
    fields: dict[str, Callable[[], Any]],
    quiet: Callable[[_CallError], bool] = lambda exc: False,
) -> Device:
    """`device` with each field read by its getter; `error` joins the failures not `quiet`."""
    try:
        get_handle()
    except _CallError as exc:
        device["error"] = str(exc)
        return device
    errors: list[str] = []
    for field, getter in fields.items():
        try:
            device[field] = getter()
        except _CallError as exc:
            if exc.code == _NVML_ERROR_GPU_IS_LOST:  # NVML's (no CUDA error has this code)
                errors.append(f"GPU is lost ({exc.function})")
                break
            if not quiet(exc):
                errors.append(str(exc))
    device["error"] = "; ".join(errors) or None
    return device


def _nvml_processes(nvml: _Nvml, handle: ctypes.c_void_p) -> list[dict[str, Any]]:
    """The GPU's compute (C) and graphics (G) processes: host PID, used MiB (0: unknown)."""

    class _ProcessInfo(ctypes.Structure):  # nvmlProcessInfo_v1_t: the unversioned queries'
        _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]

    found = []
    for kind in ("Compute", "Graphics"):
        count, infos = ctypes.c_uint(256), (_ProcessInfo * 256)()
        nvml.call(f"nvmlDeviceGet{kind}RunningProcesses", handle, ctypes.byref(count), infos)
        found += [
            {
                "pid": int(i.pid),
                "used_memory_mib": i.usedGpuMemory >> 20 if i.usedGpuMemory < 1 << 63 else 0,
                "kind": kind[0],
            }
            for i in infos[: count.value]
        ]
    return found


def _nvml_pci_bus_id(nvml: _Nvml, handle: ctypes.c_void_p) -> str:
    info = ctypes.create_string_buffer(68)  # nvmlPciInfo_t: busIdLegacy[16], 5 uints, busId[32]
    nvml.call("nvmlDeviceGetPciInfo_v3", handle, info)
    return _pci_bus_id(info.raw[36:].split(b"\0")[0].decode("ascii", "replace"))


def _nvml_memory(nvml: _Nvml, handle: ctypes.c_void_p) -> tuple[int, int]:
    memory = (ctypes.c_ulonglong * 3)()  # nvmlMemory_t: total, free, used
    nvml.call("nvmlDeviceGetMemoryInfo", handle, ctypes.byref(memory))
    return int(memory[0]) // _MIB, int(memory[2]) // _MIB


def _nvml_mig_mode(nvml: _Nvml, handle: ctypes.c_void_p) -> bool:
    try:  # the current mode and the pending one
        return nvml.ints("nvmlDeviceGetMigMode", handle, count=2)[0] == _NVML_DEVICE_MIG_ENABLE
    except _CallError as exc:
        if _unsupported(exc):
            return False
        raise


def _nvml_mig_devices(nvml: _Nvml, handle: ctypes.c_void_p) -> list[Device]:
    found: list[Device] = []
    for slot in range(nvml.ints("nvmlDeviceGetMaxMigDeviceCount", handle)[0]):
        mig = ctypes.c_void_p()
        by_index = "nvmlDeviceGetMigDeviceHandleByIndex"
        try:
            nvml.call(by_index, handle, ctypes.c_uint(slot), ctypes.byref(mig))
        except _CallError:
            continue  # a free slot (NOT_FOUND), or one this container may not see
        entry: Device = {"index": slot, "uuid": None, "memory_total_mib": None, "error": None}
        try:
            entry["uuid"] = nvml.text("nvmlDeviceGetUUID", mig)
            entry["memory_total_mib"] = _nvml_memory(nvml, mig)[0]
        except _CallError as exc:
            entry["error"] = str(exc)
        found.append(entry)
    return found


# The CUDA driver API through ctypes
class _Cuda(_Library):
    def describe(self, code: int) -> str:
        name = self._error_text("cuGetErrorName", code) or _CUDA_ERROR_NAMES.get(code)
        text = self._error_text("cuGetErrorString", code)
        label = f"{name} ({code})" if name else f"CUDA error {code}"
        return f"{label}: {text}" if text else label

    def _error_text(self, function: str, code: int) -> str | None:
        fn, out = getattr(self.lib, function, None), ctypes.c_char_p()
        if fn is None or int(fn(ctypes.c_int(code), ctypes.byref(out))) != _CUDA_SUCCESS:
            return None
        return out.value.decode("utf-8", "replace") if out.value else None


def probe_cuda() -> Section:
    """What the CUDA driver API shows, in CUDA's order; failures are recorded, never raised
    (`available` also when cuInit found no device: then `device_count` is 0)."""
    section, lib = _opened(CUDA_LIBRARY, [], ["order_matches_nvml", "ordinals_match_nvml_indices"])
    if lib is None:
        return section
    cuda = _Cuda(lib)
    with contextlib.suppress(_CallError):
        section["driver_version"] = cuda.ints("cuDriverGetVersion")[0]
    try:
        cuda.call("cuInit", ctypes.c_uint(0))
        [count] = cuda.ints("cuDeviceGetCount")
        section.update(available=True, device_count=count)
        section["devices"] = [_cuda_device(cuda, ordinal) for ordinal in range(count)]
    except _CallError as exc:  # cuInit's or the count's (a device's failures are its own)
        section.update(error=str(exc), error_code=exc.code)
        if exc.function == "cuInit" and exc.code == _CUDA_ERROR_NO_DEVICE:
            section.update(available=True, device_count=0)
    return section


def _cuda_device(cuda: _Cuda, ordinal: int) -> Device:
    handle = ctypes.c_int()

    def text(function: str, size: int) -> str:
        buf = ctypes.create_string_buffer(size)
        cuda.call(function, buf, ctypes.c_int(size), handle)
        return buf.value.decode("utf-8", "replace")

    def attribute(number: int) -> int:
        value = ctypes.c_int()
        cuda.call("cuDeviceGetAttribute", ctypes.byref(value), ctypes.c_int(number), handle)
        return int(value.value)

    def uuid() -> str:
        raw = (ctypes.c_ubyte * 16)()  # CUuuid
        cuda.call(("cuDeviceGetUuid_v2", "cuDeviceGetUuid"), ctypes.byref(raw), handle)
        h = bytes(raw).hex()
        return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"

    def memory() -> int:
        total = ctypes.c_size_t()
        cuda.call("cuDeviceTotalMem_v2", ctypes.byref(total), handle)
        return int(total.value) // _MIB

    fields: dict[str, Callable[[], Any]] = {
        "uuid": uuid,
        "name": lambda: text("cuDeviceGetName", 256),
        "pci_bus_id": lambda: _pci_bus_id(text("cuDeviceGetPCIBusId", 64)),
        "memory_total_mib": memory,
        "compute_capability": lambda: [attribute(a) for a in _CU_COMPUTE_CAPABILITY],
    }
    device: Device = {
        "ordinal": ordinal,
        **dict.fromkeys([*fields, "nvml_index", "matched_by", "error"]),
    }
    return _fill(
        device,
        lambda: cuda.call("cuDeviceGet", ctypes.byref(handle), ctypes.c_int(ordinal)),
        fields,
    )


# Mapping CUDA ordinals to NVML indices
def map_cuda_to_nvml(nvml_devices: Sequence[Device], cuda_devices: Sequence[Device]) -> None:
    """Sets `nvml_index` and `matched_by` of each CUDA device, in place: by UUID (the GPU's,
    or one of its MIG devices', whose spelling the CUDA device takes), else by PCI bus id."""
    by_uuid: dict[str, tuple[int, str]] = {}
    by_pci: dict[str, int] = {}
    for gpu in nvml_devices:
        index = int(gpu["index"])
        for unit in [gpu, *(gpu.get("mig_devices") or [])]:  # the GPU, then its MIG devices
            if unit.get("uuid"):
                by_uuid.setdefault(uuid_key(str(unit["uuid"])), (index, str(unit["uuid"])))
        pci = normalize_pci_bus_id(str(gpu.get("pci_bus_id") or ""))
        if pci is not None:
            by_pci.setdefault(pci, index)
    for device in cuda_devices:
        device.update(nvml_index=None, matched_by=None)
        uuid = device.get("uuid")
        if uuid and uuid_key(str(uuid)) in by_uuid:
            index, spelling = by_uuid[uuid_key(str(uuid))]
            device.update(nvml_index=index, matched_by="uuid", uuid=spelling)
            continue
        pci = normalize_pci_bus_id(str(device.get("pci_bus_id") or ""))
        if pci is not None and pci in by_pci:
            device.update(nvml_index=by_pci[pci], matched_by="pci_bus_id")


def order_findings(
    cuda_devices: Sequence[Device], environment: dict[str, str | None]
) -> tuple[bool | None, bool | None, list[str]]:
    """(whether CUDA enumerates in NVML's relative order, whether every CUDA ordinal is
    its NVML index, the findings about the mapping); None, None when nothing maps."""
    findings = [
        f"CUDA device {d['ordinal']} ({d.get('uuid') or '?'}) matches no NVML device"
        for d in cuda_devices
        if d.get("nvml_index") is None and d.get("error") is None
    ]
    mapped = [d for d in cuda_devices if d.get("nvml_index") is not None]
    if not mapped:
        return None, None, findings
    indices = [int(d["nvml_index"]) for d in mapped]
    in_order = all(a <= b for a, b in zip(indices, indices[1:]))
    differing = [d for d in mapped if int(d["ordinal"]) != int(d["nvml_index"])]
    pairs = ", ".join(
        f"CUDA device {d['ordinal']} is NVML index {d['nvml_index']}" for d in differing
    )
    if not in_order:
        findings.append(f"{pairs}: set CUDA_DEVICE_ORDER=PCI_BUS_ID or use UUIDs")
    elif differing:
        if any(str(d.get("uuid") or "").startswith("MIG-") for d in mapped):
            why = "each MIG device is a CUDA device of its own"
        elif environment.get("CUDA_VISIBLE_DEVICES") is not None:
            why = "CUDA_VISIBLE_DEVICES narrows CUDA's view"
        else:
            why = "some GPUs are hidden from CUDA"
        findings.append(f"{pairs} ({why}): CUDA ordinals are not NVML indices")
    return in_order, not differing, findings


# Frameworks, each in a subprocess
_RESULT_MARK = "DRGPU-PROBE-RESULT "

# A framework's child script: HEAD (imports MODULE as NAME, or reports it missing), the
# framework's own lines, TAIL (each device's matmul result, then the whole result).
_SCRIPT_HEAD = r"""
import json, os, sys, time
MARK = sys.argv[1]
SIZE = int(sys.argv[2])
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ logs: errors only
out = {"installed": False}
try:
    import MODULE as NAME
except ImportError as exc:
    out["error"] = "import MODULE: %s" % (exc,)
    print(MARK + json.dumps(out))
    sys.exit(0)
out["installed"] = True
out["version"] = str(getattr(NAME, "__version__", ""))
"""
_SCRIPT_TAIL = r"""
        entry["matmul"] = {"ok": True, "device": str(c.device), "ms": round(ms, 3),
                           "error": None}
    except Exception as exc:
        entry["matmul"] = {"ok": False, "device": None, "ms": None,
                           "error": "%s: %s" % (type(exc).__name__, exc)}
    devices.append(entry)
out["devices"] = devices
print(MARK + json.dumps(out))
"""


_FRAMEWORK_BODIES = {  # each framework module: the NAME it is imported as, its own lines
    "torch": (
        "torch",
        r"""out["cuda_available"] = bool(torch.cuda.is_available())
count = int(torch.cuda.device_count())
out["device_count"] = count
devices = []
for i in range(count):
    entry = {"index": i, "name": None, "uuid": None, "matmul": None}
    try:
        entry["name"] = str(torch.cuda.get_device_name(i))
        props = torch.cuda.get_device_properties(i)
        uuid = getattr(props, "uuid", None)
        entry["uuid"] = str(uuid) if uuid is not None else None
    except Exception as exc:
        entry["error"] = "%s: %s" % (type(exc).__name__, exc)
    try:
        device = torch.device("cuda", i)
        a = torch.rand(SIZE, SIZE, device=device)
        b = torch.rand(SIZE, SIZE, device=device)
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        c = a @ b
        torch.cuda.synchronize(device)
        ms = (time.perf_counter() - start) * 1000.0
""",
    ),
    "tensorflow": (
        "tf",
        r"""gpus = tf.config.list_physical_devices("GPU")  # memory grows: TF_FORCE_GPU_ALLOW_GROWTH
out["device_count"] = len(gpus)
devices = []
for i, gpu in enumerate(gpus):
    entry = {"index": i, "name": gpu.name, "uuid": None, "matmul": None}
    try:
        details = tf.config.experimental.get_device_details(gpu)
        entry["name"] = str(details.get("device_name", gpu.name))
    except Exception:
        pass
    try:
        with tf.device("/GPU:%d" % i):
            a = tf.random.uniform((SIZE, SIZE))
            b = tf.random.uniform((SIZE, SIZE))
            _ = tf.matmul(a, b).numpy()
            start = time.perf_counter()
            c = tf.matmul(a, b)
            _ = c.numpy()
            ms = (time.perf_counter() - start) * 1000.0
""",
    ),
}


def probe_framework(name: str, timeout_s: float) -> Section:
    """What one framework sees, from a child of this interpreter (TF_FORCE_GPU_ALLOW_GROWTH=true,
    two small matrices per device: the probe never takes a GPU's memory)."""
    keys = ("installed", "version", "error", "cuda_available", "device_count")
    section: Section = {**dict.fromkeys(keys), "devices": [], "elapsed_ms": None}
    alias, body = _FRAMEWORK_BODIES[name]
    script = _SCRIPT_HEAD.replace("MODULE", name).replace("NAME", alias) + body + _SCRIPT_TAIL
    command = [sys.executable or "python3", "-c", script, _RESULT_MARK, str(MATMUL_SIZE)]
    start = time.monotonic()
    try:
        done = subprocess.run(
            command,
            env={**os.environ, "TF_FORCE_GPU_ALLOW_GROWTH": "true"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        section["error"] = f"timed out after {timeout_s:g} s"
        return section
    except OSError as exc:
        section["error"] = f"cannot run {command[0]}: {exc}"
        return section
    finally:
        section["elapsed_ms"] = round((time.monotonic() - start) * 1000.0, 1)
    marked = [line for line in done.stdout.splitlines() if line.startswith(_RESULT_MARK)]
    try:
        result = json.loads(marked[-1][len(_RESULT_MARK) :])
    except (IndexError, ValueError):
        result = None
    if not isinstance(result, dict):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        section["error"] = f"exited with code {done.returncode}: {tail}"
        return section
    section.update((key, value) for key, value in result.items() if key in section)
    if done.returncode != 0 and section["error"] is None:
        section["error"] = f"exited with code {done.returncode}"
    return section


def framework_findings(
    name: str, section: Section, cuda_count: int | None
) -> tuple[list[str], list[str]]:
    """(findings, failures): failures are what breaks an expectation when one is given."""
    if section.get("installed") is False:
        return [f"{name}: not installed"], []
    failures = [f"{name}: {section['error']}"] if section.get("error") else []
    for device in section.get("devices") or []:
        if device.get("error"):
            failures.append(f"{name} device {device.get('index')}: {device['error']}")
        matmul = device.get("matmul") or {}
        if matmul and not matmul.get("ok"):
            failures.append(
                f"{name} device {device.get('index')}: matrix product failed: {matmul.get('error')}"
            )
    count = section.get("device_count")
    findings = []
    if count is not None and cuda_count is not None and count != cuda_count:
        findings.append(f"{name} sees {count} GPU(s) but the CUDA driver shows {cuda_count}")
    if name == "torch" and count == 0 and section.get("cuda_available") is False:
        findings.append("torch: CUDA is not available (a CPU-only build, or no GPU visible)")
    return findings + failures, failures


# Findings and expectations
def nvml_units(nvml: Section) -> list[tuple[str | None, str | None]]:
    """What NVML shows as usable units, (uuid, parent GPU uuid or None) each: a GPU in MIG
    mode with MIG devices is its MIG devices; any other GPU is itself."""
    if not nvml.get("available"):
        return []
    units: list[tuple[str | None, str | None]] = []
    for gpu in nvml.get("devices") or []:
        migs = [m for m in gpu.get("mig_devices") or [] if m.get("uuid")]
        if gpu.get("mig_mode") and migs:
            units.extend((str(m["uuid"]), gpu.get("uuid")) for m in migs)
        else:
            units.append((gpu.get("uuid"), None))
    return units


def _count_problems(
    expect: int, nvml: Section, cuda: Section, frameworks: dict[str, Section]
) -> list[str]:
    problems: list[str] = []
    counts = (("NVML", nvml, len(nvml_units(nvml))), ("CUDA", cuda, cuda.get("device_count")))
    for source, section, count in counts:
        if section.get("loaded") and int(count or 0) != expect:
            why = "" if section.get("available") else f" ({section.get('error')})"
            problems.append(f"{source} shows {int(count or 0)} GPU(s){why}, expected {expect}")
    if not nvml.get("loaded") and not cuda.get("loaded") and expect != 0:
        problems.append(
            f"no NVIDIA library ({NVML_LIBRARY}, {CUDA_LIBRARY}) in the container: "
            f"it sees 0 GPUs, expected {expect}"
        )
    for name, section in frameworks.items():
        seen = section.get("device_count")
        if section.get("installed") and seen is not None and seen != expect:
            problems.append(f"{name} sees {seen} GPU(s), expected {expect}")
    return problems


def _uuid_problems(expected: Sequence[str], nvml: Section, cuda: Section) -> list[str]:
    wanted = {uuid_key(u): u for u in expected}
    units = nvml_units(nvml)
    shown: dict[str, list[tuple[str, Any]]] = {}  # each library's units: (the problem, the UUID)
    if nvml.get("loaded") or not cuda.get("loaded"):
        # a GPU that cannot say its UUID is a device error, reported as such
        shown["NVML"] = [(f"NVML shows {u}, not expected", u) for u, _ in units if u is not None]
    if cuda.get("loaded"):
        shown["CUDA"] = [
            (f"CUDA device {d['ordinal']} ({d.get('uuid') or '?'}) is not expected", d.get("uuid"))
            for d in cuda.get("devices") or []
        ]
    parents = {uuid_key(str(u)): uuid_key(p) for u, p in units if u and p}  # a MIG device's GPU
    problems: list[str] = []
    for library, found in shown.items():
        seen: set[str] = set()
        for problem, uuid in found:
            key = uuid_key(str(uuid)) if uuid else ""
            ids = {key, parents.get(key, "")} - {""}  # a MIG device's parent GPU too
            seen |= ids
            if not ids & wanted.keys():
                problems.append(problem)
        problems.extend(
            f"{library} does not show expected {u}" for k, u in wanted.items() if k not in seen
        )
    return problems


def evaluate(
    report: Report, expect: int | None = None, expect_uuids: Sequence[str] | None = None
) -> Section:
    """The `expectations` section of a report: met, and every problem found."""
    nvml: Section = report.get("nvml") or {}
    cuda: Section = report.get("cuda") or {}
    frameworks: dict[str, Section] = report.get("frameworks") or {}
    problems: list[str] = []
    if expect is not None:
        problems.extend(_count_problems(expect, nvml, cuda, frameworks))
    if expect_uuids:
        problems.extend(_uuid_problems(list(expect_uuids), nvml, cuda))
    if expect is not None or expect_uuids:
        for gpu in nvml.get("devices") or []:
            if gpu.get("error"):
                problems.append(f"NVML index {gpu['index']}: {gpu['error']}")
        for name, section in frameworks.items():
            problems.extend(framework_findings(name, section, None)[1])
    return {
        "expect": expect,
        "expect_uuids": list(expect_uuids) if expect_uuids else None,
        "met": not problems,
        "problems": problems,
    }


def _findings(report: Report) -> list[str]:
    env: dict[str, str | None] = report["environment"]
    nvml: Section = report["nvml"]
    cuda: Section = report["cuda"]
    findings: list[str] = []
    if not nvml["loaded"] or not nvml["available"]:
        findings.append(f"NVML: {nvml['error']}")
    for gpu in nvml["devices"]:
        if gpu.get("error"):
            findings.append(f"NVML index {gpu['index']}: {gpu['error']}")
    if not cuda["loaded"]:
        capabilities = env.get("NVIDIA_DRIVER_CAPABILITIES")
        hint = ""
        if capabilities is not None and not {"compute", "all"} & set(capabilities.split(",")):
            hint = (
                f" (NVIDIA_DRIVER_CAPABILITIES={capabilities} lacks 'compute'"
                f": the runtime did not mount {CUDA_LIBRARY})"
            )
        findings.append(f"CUDA: {cuda['error']}{hint}")
        if nvml["available"]:
            findings.append("CUDA count not checked: NVML alone counts")
    elif cuda["error"]:
        findings.append(f"CUDA: cuInit failed: {cuda['error']}")
    for device in cuda["devices"]:
        if device.get("error"):
            findings.append(f"CUDA device {device['ordinal']}: {device['error']}")
    if nvml["available"] and cuda["available"]:
        order, same, mapping = order_findings(cuda["devices"], env)
        cuda.update(order_matches_nvml=order, ordinals_match_nvml_indices=same)
        findings.extend(mapping)
    findings.extend(visibility_findings(env, nvml, cuda))
    for name, section in report["frameworks"].items():
        findings.extend(framework_findings(name, section, cuda.get("device_count"))[0])
    return findings


def _shown(nvml: Section, cuda: Section) -> tuple[int, int]:
    """How many GPUs NVML and CUDA show."""
    return len(nvml_units(nvml)), int(cuda.get("device_count") or 0) if cuda.get("available") else 0


def gpu_injection(env: dict[str, str | None], nvml: Section, cuda: Section) -> str | None:
    """How the container got the GPUs it shows: "runtime", "cdi", "swarm-resource" or None
    (docs/probe.md, `gpu_injection`)."""
    visible = env.get("NVIDIA_VISIBLE_DEVICES")
    if visible is None or not any(_shown(nvml, cuda)):
        return None
    if visible.strip().lower() not in _NO_GPU_VALUES:
        return "runtime"
    return "swarm-resource" if env.get("DOCKER_RESOURCE_NVIDIA-GPU") else "cdi"


def visibility_findings(env: dict[str, str | None], nvml: Section, cuda: Section) -> list[str]:
    """What NVIDIA_VISIBLE_DEVICES says against what NVML and CUDA show: the libraries are
    the truth, the variable only how the GPUs came (never "no GPU" while GPUs show)."""
    visible = env.get("NVIDIA_VISIBLE_DEVICES")
    injection = gpu_injection(env, nvml, cuda)  # "swarm-resource": as the engine chose, no news
    if injection == "cdi":
        nvml_count, cuda_count = _shown(nvml, cuda)
        return [
            f"NVIDIA_VISIBLE_DEVICES={visible!r}, yet NVML shows {nvml_count} GPU(s) and"
            f" CUDA {cuda_count}: the GPUs were injected through CDI (its spec sets"
            " NVIDIA_VISIBLE_DEVICES=void), not by the NVIDIA runtime"
        ]
    if injection is None and visible is not None and visible.strip().lower() in _NO_GPU_VALUES:
        return [f"NVIDIA_VISIBLE_DEVICES={visible!r} and NVML and CUDA show no GPU: none was given"]
    return []


def collect(
    *,
    expect: int | None = None,
    expect_uuids: Sequence[str] | None = None,
    frameworks: Sequence[str] = (),
    framework_timeout_s: float = DEFAULT_FRAMEWORK_TIMEOUT_S,
) -> Report:
    """Probe everything and return the report (schema_version 1); never raises on GPU trouble."""
    import platform  # here: drgpu imports this module for its CUDA order, which needs none

    start = time.monotonic()
    report: Report = {
        "schema_version": SCHEMA_VERSION,
        "probe": {
            "python": platform.python_version(),
            "executable": sys.executable,
            "hostname": platform.node(),
            "elapsed_ms": None,
        },
        "environment": {name: os.environ.get(name) for name in ENVIRONMENT_VARIABLES},
        "nvml": probe_nvml(),
        # NVML first: libcuda reads CUDA_VISIBLE_DEVICES at cuInit, NVML ignores it
        "cuda": probe_cuda(),
        "frameworks": {name: probe_framework(name, framework_timeout_s) for name in frameworks},
        "findings": [],
        "expectations": {},
    }
    map_cuda_to_nvml(report["nvml"]["devices"], report["cuda"]["devices"])
    report["findings"] = _findings(report)
    report["gpu_injection"] = gpu_injection(report["environment"], report["nvml"], report["cuda"])
    report["expectations"] = evaluate(report, expect, expect_uuids)
    report["probe"]["elapsed_ms"] = round((time.monotonic() - start) * 1000.0, 1)
    return report


# Text output
def _or(value: Any, default: str = "?") -> str:
    return default if value is None else str(value)


def _cc(value: Any) -> str:
    return f"{value[0]}.{value[1]}" if isinstance(value, list) and len(value) == 2 else "?"


def render_text(report: Report) -> str:
    """The human report."""
    probe = report["probe"]
    lines = [f"drgpu probe on {probe['hostname']} (python {probe['python']})", "Environment:"]
    lines += [
        f"  {name:<28} {'(unset)' if value is None else repr(value)}"
        for name, value in report["environment"].items()
    ]
    lines.extend(_nvml_text(report["nvml"]))
    lines.extend(_cuda_text(report["cuda"]))
    if report["frameworks"]:
        lines.append("Frameworks:")
        for name, section in report["frameworks"].items():
            lines.extend(_framework_text(name, section))
    lines.append("Findings:" if report["findings"] else "Findings: none")
    lines.extend(f"  - {finding}" for finding in report["findings"])
    expectations = report["expectations"]
    if expectations.get("expect") is not None or expectations.get("expect_uuids"):
        lines.append("Expectations: " + ("met" if expectations["met"] else "NOT MET"))
        lines.extend(f"  - {problem}" for problem in expectations["problems"])
    return "\n".join(lines) + "\n"


def _nvml_text(nvml: Section) -> list[str]:
    if not nvml["available"]:
        return [f"NVML: unavailable: {nvml['error']}"]
    lines = [
        f"NVML: driver {_or(nvml['driver_version'])}, CUDA driver "
        f"{_or(format_cuda_version(nvml['cuda_driver_version']))}, "
        f"{nvml['device_count']} GPU(s) (NVML index = PCI bus order)"
    ]
    for gpu in nvml["devices"]:
        if gpu["uuid"] is None and gpu["error"]:
            lines.append(f"  [{gpu['index']}] error: {gpu['error']}")
            continue
        lines.append(
            f"  [{gpu['index']}] {_device_text(gpu, '  MIG on' if gpu['mig_mode'] else '')}"
        )
        for mig in gpu["mig_devices"]:
            lines.append(f"      MIG {_or(mig['uuid'])}  {_or(mig['memory_total_mib'])} MiB")
    return lines


def _cuda_text(cuda: Section) -> list[str]:
    if not cuda["loaded"]:
        return [f"CUDA: unavailable: {cuda['error']}"]
    version = format_cuda_version(cuda["driver_version"])
    head = f"CUDA: driver API {_or(version)}, {_or(cuda['device_count'], '0')} device(s)"
    if cuda["error"]:
        head += f" (cuInit: {cuda['error']})"
    lines = [head + (" in CUDA order" if cuda["devices"] else "")]
    lines += [
        f"  cuda:{d['ordinal']} -> NVML {_or(d['nvml_index'])}  {_device_text(d)}"
        for d in cuda["devices"]
    ]
    return lines


def _device_text(device: Device, mig: str = "") -> str:
    """A GPU's line, as NVML and CUDA describe it."""
    return (
        f"{_or(device['uuid'])}  {_or(device['name'])}  {_or(device['pci_bus_id'])}"
        f"  {_or(device['memory_total_mib'])} MiB  cc {_cc(device['compute_capability'])}{mig}"
        + (f"  error: {device['error']}" if device["error"] else "")
    )


def _framework_text(name: str, section: Section) -> list[str]:
    if section["installed"] is False:
        return [f"  {name}: not installed"]
    if section["installed"] is None:
        return [f"  {name}: {section['error']}"]
    lines = [
        f"  {name} {_or(section['version'])}: {_or(section['device_count'])} GPU(s)"
        + (f", error: {section['error']}" if section["error"] else "")
    ]
    for device in section["devices"]:
        matmul = device.get("matmul") or {}
        result = (
            f"{MATMUL_SIZE}x{MATMUL_SIZE} matmul on {matmul.get('device')} in {matmul.get('ms')} ms"
            if matmul.get("ok")
            else f"matmul failed: {matmul.get('error')}"
        )
        lines.append(f"    [{device.get('index')}] {_or(device.get('name'))}: {result}")
    return lines


# Command line
def main(
    argv: Sequence[str] | None = None, *, usage_error: Callable[[str], NoReturn] | None = None
) -> int:
    """Run the probe; returns the exit code (argparse exits 2 itself on bad usage, or
    `usage_error` is called with the problem: drgpu's own one-line error)."""
    import argparse  # here: drgpu imports this module for its CUDA order, which needs none

    parser = argparse.ArgumentParser(
        prog="probe.py",
        description="Report which GPUs this container really sees (NVML, CUDA, frameworks).",
        epilog="exit codes: 0 ok, 1 internal error, 2 usage, 6 expectation not met",
    )
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    parser.add_argument(
        "--expect", type=int, metavar="N", help="the number of GPUs the container must see"
    )
    parser.add_argument(
        "--expect-uuid",
        nargs="+",
        action="extend",
        metavar="UUID",
        dest="expect_uuids",
        help="the exact GPU/MIG UUIDs the container must see",
    )
    parser.add_argument(
        "--frameworks",
        default="",
        metavar="LIST",
        help="comma-separated frameworks to try: torch,tensorflow",
    )
    parser.add_argument(
        "--framework-timeout",
        type=float,
        metavar="S",
        default=DEFAULT_FRAMEWORK_TIMEOUT_S,
        help="seconds each framework subprocess may take (default: 120)",
    )
    if usage_error is not None:
        parser.error = usage_error  # type: ignore[method-assign, assignment]
    args = parser.parse_args(argv)
    if args.expect is not None and args.expect < 0:
        parser.error("--expect must be 0 or more")
    if not all(uuid.strip() for uuid in args.expect_uuids or ()):
        parser.error("--expect-uuid is empty: give a GPU or MIG UUID")
    if args.framework_timeout <= 0:
        parser.error("--framework-timeout must be positive")
    try:
        frameworks = parse_frameworks(args.frameworks)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        report = collect(
            expect=args.expect,
            expect_uuids=args.expect_uuids,
            frameworks=frameworks,
            framework_timeout_s=args.framework_timeout,
        )
        text = json.dumps(report, indent=2) + "\n" if args.json else render_text(report)
    except Exception as exc:  # a bug in the probe: one line, not a traceback
        sys.stderr.write(f"probe: internal error: {type(exc).__name__}: {exc}\n")
        return EXIT_UNEXPECTED
    sys.stdout.write(text)
    sys.stdout.flush()
    return EXIT_OK if report["expectations"]["met"] else EXIT_MISMATCH


def on_node(namespace: str, node: str, source: str, wanted: dict[str, list[str]]) -> None:
    """`drgpu up`'s proof on the Swarm node `node` (a one-shot service with the node's
    engine socket mounted): this probe run in each container of the stack `namespace` whose
    task is `wanted` (task id: the probe's arguments); one JSON line each (task, exit code,
    output), or one `{"error": ...}` line when the engine is another node's."""
    import http.client
    import socket
    import urllib.parse

    class Engine(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.connect("/var/run/docker.sock")

    def call(method: str, path: str, body: Any = None) -> bytes:
        engine = Engine("localhost", timeout=120)
        data = json.dumps(body).encode() if body else None
        engine.request(method, path, data, {"Content-Type": "application/json"})
        answer = engine.getresponse()
        text = answer.read()
        if answer.status >= 300:
            raise OSError(f"{method} {path.partition('?')[0]}: {answer.status} {text[:200]!r}")
        return text

    def run(container: str, arguments: list[str]) -> tuple[int, str]:
        command = ["python3", "-c", LAUNCHER, *arguments]
        body = {"Cmd": command, "Env": [f"{SOURCE_VARIABLE}={source}"], "AttachStdout": True}
        made = json.loads(call("POST", f"/containers/{container}/exec", body))
        stream, output = call("POST", f"/exec/{made['Id']}/start", {"Tty": False}), b""
        while len(stream) >= 8:  # the engine's frames: 8 bytes of header, then the payload
            size = int.from_bytes(stream[4:8], "big")
            output, stream = output + stream[8 : 8 + size], stream[8 + size :]
        code = json.loads(call("GET", f"/exec/{made['Id']}/json"))["ExitCode"]
        return code, output.decode("utf-8", "replace")

    found = json.loads(call("GET", "/info")).get("Swarm", {}).get("NodeID")
    if found != node:
        print(json.dumps({"error": f"the socket mounted there is node {found}'s engine"}))
        return
    query = json.dumps({"label": [f"com.docker.stack.namespace={namespace}"]})
    for listed in json.loads(call("GET", f"/containers/json?filters={urllib.parse.quote(query)}")):
        task = (listed.get("Labels") or {}).get("com.docker.swarm.task.id")
        if task in wanted:
            try:
                code, output = run(listed["Id"], wanted[task])
            except OSError as exc:
                code, output = -1, str(exc)
            print(json.dumps({"task": task, "exit_code": code, "output": output}), flush=True)


def node_gpus() -> None:
    """`drgpu status`'s reading of a Swarm node (a one-shot service that sees every GPU,
    the host's /proc at /host/proc): one JSON line, NVML's view with each GPU's processes,
    and each process's cgroup file (none: not visible)."""
    nvml = probe_nvml(processes=True)
    pids = {p["pid"] for d in nvml.get("devices") or [] for p in d.get("processes") or []}
    cgroups = {}
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/host/proc/{pid}/cgroup") as cgroup:
            cgroups[pid] = cgroup.read()
    print(json.dumps({"nvml": nvml, "cgroups": cgroups}), flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["--node-gpus"]:  # a Swarm job: source in env
    node_gpus()
elif __name__ == "__main__" and sys.argv[1:2] == ["--on-node"]:  # run as a Swarm job: source in env
    tasks = json.loads(os.environ["DRGPU_TASKS"])
    on_node(sys.argv[2], sys.argv[3], os.environ[SOURCE_VARIABLE], tasks)
elif __name__ == "__main__":
    sys.exit(main())
