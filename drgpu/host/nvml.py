"""The NVML boundary: the only module that imports pynvml (from nvidia-ml-py)."""

from __future__ import annotations

import ctypes
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from functools import partial
from typing import Any, TypeVar

from drgpu.core.model import Gpu, GpuEvent, GpuHealth, GpuProcess, Inventory, MigDevice
from drgpu.core.topology import checked_pci_bus_id, merge_processes
from drgpu.errors import NvmlUnavailableError
from drgpu.host import trace

T = TypeVar("T")
_MIB = 1024 * 1024

_INIT_FAILURES = {
    "NVMLError_LibraryNotFound": (
        "NVML library not found (libnvidia-ml.so.1): the NVIDIA driver is not installed",
        "install the NVIDIA driver; `nvidia-smi` must work on this host",
    ),
    "NVMLError_DriverNotLoaded": (
        "the NVIDIA driver is installed but not loaded",
        "load the kernel module (`sudo modprobe nvidia`) or reboot after a driver update",
    ),
    "NVMLError_NoPermission": (
        "no permission to talk to the NVIDIA driver",
        "check the permissions of /dev/nvidia*, or run as a user in the video group",
    ),
    "NVMLError_LibRmVersionMismatch": (
        "the NVIDIA driver library and kernel module have different versions",
        "reboot to load the kernel module that matches the installed driver",
    ),
}


def preload() -> None:
    """Import the NVML binding ahead of use (it takes a while), e.g. in a thread."""
    with suppress(ImportError):
        import pynvml  # noqa: F401


@contextmanager
def nvml_session() -> Iterator[Any]:
    """An initialised pynvml module, shut down on exit; NVML failures become errors."""
    try:
        import pynvml  # lazy: the NVML binding is heavy
    except ImportError:
        raise NvmlUnavailableError(
            "the NVML binding is missing", hint="pip install nvidia-ml-py"
        ) from None
    nvml = _Traced(pynvml) if trace.enabled() else pynvml
    try:
        nvml.nvmlInit()
    except pynvml.NVMLError as exc:
        unknown = (f"NVML failed to start: {exc}", None)
        message, hint = _INIT_FAILURES.get(type(exc).__name__, unknown)
        raise NvmlUnavailableError(message, hint=hint) from None
    try:
        yield nvml
    finally:
        with suppress(pynvml.NVMLError):  # a watch's NVML may have failed and not come back
            nvml.nvmlShutdown()


class _Traced:
    """pynvml as DRGPU_LOG shows it: each `nvml...` call logged with its duration and
    error (only while logging is on: a live view makes a hundred calls a tick)."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._module, name)
        if not name.startswith("nvml") or not callable(found):
            return found  # the error classes, constants
        return partial(_traced_call, name, found)


def _traced_call(name: str, function: Callable[..., T], *args: Any) -> T:
    started, outcome = time.monotonic(), "in"
    try:
        return function(*args)
    except Exception as exc:
        outcome = f"failed ({type(exc).__name__}) in"
        raise
    finally:
        trace.debug(__name__, "%s %s %.3f ms", name, outcome, (time.monotonic() - started) * 1000)


def read_inventory() -> Inventory:
    """Every GPU NVML shows, in NVML index (PCI bus) order."""
    with nvml_session() as nvml:
        return inventory_from_nvml(nvml)


def inventory_from_nvml(nvml: Any) -> Inventory:
    """The inventory through an initialised pynvml module."""
    gpus = tuple(_gpu(nvml, index) for index in range(nvml.nvmlDeviceGetCount()))
    return Inventory(
        gpus=gpus,
        driver_version=_text(_field(nvml, nvml.nvmlSystemGetDriverVersion)),
        cuda_driver_version=_field(nvml, lambda: int(nvml.nvmlSystemGetCudaDriverVersion())),
    )


def _gpu(nvml: Any, index: int) -> Gpu:
    """A GPU field by field: one NVML cannot give (memory on a MIG-enabled parent without
    privileges, a sensor) is n/a (None, 0 MiB, compute 0.0) alone; only NVML's
    GPU_IS_LOST, or no UUID, name or PCI bus id, makes the GPU lost."""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        total, used = _memory(nvml, handle)
        mig_mode = bool(_field(nvml, lambda: nvml.nvmlDeviceGetMigMode(handle)[0]))
        capability = _field(nvml, lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle))
        major, minor = capability or (0, 0)
        processes, processes_unknown = _processes(nvml, handle)
        return Gpu(
            index=index,
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)) or "",
            name=_text(nvml.nvmlDeviceGetName(handle)) or "",
            pci_bus_id=checked_pci_bus_id(_text(nvml.nvmlDeviceGetPciInfo(handle).busId) or ""),
            memory_total_mib=total,
            memory_used_mib=used,
            compute_capability=(int(major), int(minor)),
            utilization_gpu_percent=_field(
                nvml, lambda: int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            ),
            temperature_c=_field(nvml, lambda: int(nvml.nvmlDeviceGetTemperature(handle, 0))),
            power_w=_field(nvml, lambda: int(nvml.nvmlDeviceGetPowerUsage(handle)) / 1000),
            mig_mode=mig_mode,
            mig_devices=_mig_devices(nvml, handle) if mig_mode else (),
            processes=processes,
            processes_unknown=processes_unknown,
        )
    except nvml.NVMLError as exc:
        error = "gpu_is_lost" if isinstance(exc, nvml.NVMLError_GpuIsLost) else str(exc)
        return Gpu(index=index, uuid="", name="", pci_bus_id="", memory_total_mib=0, error=error)


def _memory(nvml: Any, handle: Any) -> tuple[int, int]:
    """(total, used) MiB: through the v2 query where the driver has it (used without the
    memory the driver reserves), else v1; (0, 0), n/a, where NVML cannot tell."""
    for version in (nvml.nvmlMemory_v2, None):
        memory: Any = _field(nvml, partial(nvml.nvmlDeviceGetMemoryInfo, handle, version))
        if memory is not None:
            return int(memory.total) // _MIB, int(memory.used) // _MIB
    return 0, 0


def _mig_devices(nvml: Any, handle: Any) -> tuple[MigDevice, ...]:
    migs = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        with suppress(nvml.NVMLError_NotFound):  # an empty slot
            migs.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
    return tuple(
        MigDevice(_text(nvml.nvmlDeviceGetUUID(mig)) or "", _memory(nvml, mig)[0]) for mig in migs
    )


def _processes(nvml: Any, handle: Any) -> tuple[tuple[GpuProcess, ...], str | None]:
    """Compute and graphics processes (a simulator renders): one entry per PID; and why
    NVML could not list them (then they are unknown, never "none")."""
    found: list[tuple[int, int, str]] = []
    for kind, query in (("C", "Compute"), ("G", "Graphics")):
        try:
            running = _running_processes(nvml, handle, f"nvmlDeviceGet{query}RunningProcesses")
        except nvml.NVMLError as exc:
            return (), f"{query.lower()} processes: {exc}"
        found.extend((pid, memory // _MIB, kind) for pid, memory in running)
    return merge_processes(found), None


class _ProcessInfoV1(ctypes.Structure):  # nvmlProcessInfo_v1_t (drivers < 510)
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class _ProcessInfoV2(ctypes.Structure):  # nvmlProcessInfo_v2_t, also the _v3 queries' layout
    _fields_ = [
        *_ProcessInfoV1._fields_,
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class _ProcessInfoV3Cc(ctypes.Structure):
    """The _v3 layout (with confidential-computing memory) of drivers that have
    nvmlDeviceGetConfComputeMemSizeInfo but not ...RunningProcessDetailList (as nvitop)."""

    _fields_ = [*_ProcessInfoV2._fields_, ("usedGpuCcProtectedMemory", ctypes.c_ulonglong)]


def _running_processes(nvml: Any, handle: Any, query: str) -> list[tuple[int, int]]:
    """(PID, used bytes) of each process `query` lists, through the newest version of it
    this driver has (_v3, _v2, v1; FUNCTION_NOT_FOUND skips one); else an NVMLError."""
    confidential = _has(nvml, "nvmlDeviceGetConfComputeMemSizeInfo")
    cc = confidential and not _has(nvml, "nvmlDeviceGetRunningProcessDetailList")
    v3 = _ProcessInfoV3Cc if cc else _ProcessInfoV2
    for suffix, layout in (("_v3", v3), ("_v2", _ProcessInfoV2)):  # newest first, as nvitop
        with suppress(nvml.NVMLError_FunctionNotFound):
            return _process_query(nvml, handle, query + suffix, layout)
    return _process_query(nvml, handle, query, _ProcessInfoV1)


def _has(nvml: Any, symbol: str) -> bool:
    with suppress(nvml.NVMLError):
        return bool(nvml._nvmlGetFunctionPointer(symbol))
    return False


def _process_query(
    nvml: Any, handle: Any, function: str, layout: type[ctypes.Structure]
) -> list[tuple[int, int]]:
    """One version of a process query, by NVML's size protocol (as pynvml calls it)."""
    call = nvml._nvmlGetFunctionPointer(function)  # FunctionNotFound when the driver lacks it
    count = ctypes.c_uint(0)
    infos = (layout * 0)()
    code = call(handle, ctypes.byref(count), None)
    if code == nvml.NVML_ERROR_INSUFFICIENT_SIZE:
        count.value = count.value * 2 + 5  # room for processes started meanwhile
        infos = (layout * count.value)()
        code = call(handle, ctypes.byref(count), infos)
    if code != nvml.NVML_SUCCESS:
        raise nvml.NVMLError(code)
    unavailable = ctypes.c_ulonglong(-1).value  # NVML_VALUE_NOT_AVAILABLE (WDDM)
    return [
        (int(info.pid), 0 if info.usedGpuMemory == unavailable else int(info.usedGpuMemory))
        for info in infos[: count.value]
    ]


def _field(nvml: Any, query: Callable[[], T]) -> T | None:
    """One field of a GPU (or of the driver): None where NVML cannot give it, unless lost."""
    try:
        return query()
    except nvml.NVMLError_GpuIsLost:
        raise
    except nvml.NVMLError:
        return None


def watched_inventory(nvml: Any, *, restart: bool) -> Inventory:
    """The inventory for a watch that keeps its session (with `restart`, NVML restarted
    first); an NVML failure (the driver reloaded) is an NvmlUnavailableError."""
    try:
        if restart:
            with suppress(nvml.NVMLError):
                nvml.nvmlShutdown()
            nvml.nvmlInit()
        return inventory_from_nvml(nvml)
    except nvml.NVMLError as exc:
        raise NvmlUnavailableError(f"NVML failed: {exc}") from None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def read_health() -> tuple[GpuHealth, ...]:
    """Each GPU's health, through a session of its own."""
    with nvml_session() as nvml:
        return health_from_nvml(nvml, nvml.nvmlDeviceGetCount())


def health_from_nvml(nvml: Any, count: int) -> tuple[GpuHealth, ...]:
    """The health of the first `count` GPUs (a field NVML cannot give: None; a lost GPU: none)."""
    found = []
    for index in range(count):
        with suppress(nvml.NVMLError):
            found.append(_health(nvml, nvml.nvmlDeviceGetHandleByIndex(index), index))
    return tuple(found)


def _health(nvml: Any, handle: Any, index: int) -> GpuHealth:
    def get(name: str, *args: Any) -> Any:
        return _field(nvml, lambda: getattr(nvml, name)(handle, *args))

    remap = get("nvmlDeviceGetRemappedRows") or (None, None, None, None)
    reasons = get("nvmlDeviceGetCurrentClocksEventReasons")
    return GpuHealth(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)) or "",
        energy_mj=get("nvmlDeviceGetTotalEnergyConsumption"),
        throttle=get("nvmlDeviceGetCurrentClocksThrottleReasons") if reasons is None else reasons,
        retired_pending=_flag(get("nvmlDeviceGetRetiredPagesPendingStatus")),
        remapped_uncorrectable=remap[1],
        remap_pending=_flag(remap[2]),
        remap_failure=_flag(remap[3]),
        ecc_uncorrected=get("nvmlDeviceGetTotalEccErrors", 1, 0),  # uncorrected, volatile
        persistence=_flag(get("nvmlDeviceGetPersistenceMode")),
    )


def _flag(value: Any) -> bool | None:
    return None if value is None else bool(value)


class EventFollower:
    """A thread keeping the last 64 events (critical Xid, double-bit ECC) of every GPU;
    `unsupported` says why none can be followed. When NVML fails (the driver reloaded)
    it waits and starts a new event set."""

    def __init__(self, nvml: Any) -> None:
        import threading  # lazy: only a watch follows events

        self._nvml = nvml
        self.events: deque[GpuEvent] = deque(maxlen=64)
        self.unsupported: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="nvml-events", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop following (within one wait)."""
        self._stop.set()
        self._thread.join()

    def _follow(self) -> None:
        nvml = self._nvml
        while not self._stop.is_set():
            try:
                events = nvml.nvmlEventSetCreate()
            except nvml.NVMLError as exc:
                self.unsupported = str(exc)
                self._stop.wait(5.0)
                continue
            self.unsupported = None
            try:
                gpus = self._register(events)
                while not self._stop.is_set():
                    with suppress(nvml.NVMLError_Timeout):
                        data = nvml.nvmlEventSetWait_v2(events, 500)
                        index, uuid = gpus.get(_address(data.device), (-1, ""))
                        self.events.append(
                            GpuEvent(index, uuid, data.eventType, data.eventData, time.time())
                        )
            except nvml.NVMLError:
                self._stop.wait(1.0)
            finally:
                with suppress(nvml.NVMLError):
                    nvml.nvmlEventSetFree(events)

    def _register(self, events: Any) -> dict[int | None, tuple[int, str]]:
        """(NVML index, UUID) by handle address; each GPU registered for the events it supports."""
        nvml = self._nvml
        gpus = {}
        wanted = nvml.nvmlEventTypeXidCriticalError | nvml.nvmlEventTypeDoubleBitEccError
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            gpus[_address(handle)] = (index, "")
            with suppress(nvml.NVMLError):
                gpus[_address(handle)] = (index, _text(nvml.nvmlDeviceGetUUID(handle)) or "")
                if supported := wanted & nvml.nvmlDeviceGetSupportedEventTypes(handle):
                    nvml.nvmlDeviceRegisterEvents(handle, supported, events)
        return gpus


def _address(handle: Any) -> int | None:
    return ctypes.cast(handle, ctypes.c_void_p).value


def persistence_modes(nvml: Any) -> tuple[bool | None, ...]:
    """Each GPU's persistence mode by NVML index; None where NVML cannot tell."""
    modes: list[bool | None] = []
    for index in range(nvml.nvmlDeviceGetCount()):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            modes.append(bool(nvml.nvmlDeviceGetPersistenceMode(handle)))
        except nvml.NVMLError:
            modes.append(None)
    return tuple(modes)
