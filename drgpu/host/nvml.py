"""The NVML boundary: the only module that imports pynvml (from nvidia-ml-py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

from drgpu.core.model import Gpu, GpuProcess, Inventory, MigDevice
from drgpu.core.topology import merge_processes, normalize_pci_bus_id
from drgpu.errors import NvmlUnavailableError
from drgpu.host import trace

T = TypeVar("T")
_MIB = 1024 * 1024

_INIT_FAILURES = {
    "NVMLError_LibraryNotFound": (
        "library_not_found",
        "NVML library not found (libnvidia-ml.so.1): the NVIDIA driver is not installed",
        "install the NVIDIA driver; `nvidia-smi` must work on this host",
    ),
    "NVMLError_DriverNotLoaded": (
        "driver_not_loaded",
        "the NVIDIA driver is installed but not loaded",
        "load the kernel module (`sudo modprobe nvidia`) or reboot after a driver update",
    ),
    "NVMLError_NoPermission": (
        "no_permission",
        "no permission to talk to the NVIDIA driver",
        "check the permissions of /dev/nvidia*, or run as a user in the video group",
    ),
    "NVMLError_LibRmVersionMismatch": (
        "lib_rm_version_mismatch",
        "the NVIDIA driver library and kernel module have different versions",
        "reboot to load the kernel module that matches the installed driver",
    ),
}


def preload() -> None:
    """Import the NVML binding ahead of use (it takes a while), e.g. in a thread; when it
    is missing, `nvml_session` says so once used."""
    with suppress(ImportError):
        import pynvml  # noqa: F401


@contextmanager
def nvml_session() -> Iterator[Any]:
    """An initialised pynvml module, shut down on exit; NVML failures become errors."""
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailableError(
            "the NVML binding is missing", hint="pip install nvidia-ml-py"
        ) from None
    nvml = _Traced(pynvml) if trace.enabled() else pynvml
    try:
        nvml.nvmlInit()
    except pynvml.NVMLError as exc:
        _code, message, hint = _INIT_FAILURES.get(
            type(exc).__name__, ("unknown", f"NVML failed to start: {exc}", None)
        )
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
        return lambda *args: _traced_call(name, found, args)


def _traced_call(name: str, function: Callable[..., T], args: tuple[Any, ...]) -> T:
    started = time.monotonic()
    try:
        result = function(*args)
    except Exception as exc:
        took = (time.monotonic() - started) * 1000
        trace.debug(__name__, "%s failed (%s) in %.3f ms", name, type(exc).__name__, took)
        raise
    trace.debug(__name__, "%s in %.3f ms", name, (time.monotonic() - started) * 1000)
    return result


def read_inventory() -> Inventory:
    """Every GPU NVML shows, in NVML index (PCI bus) order."""
    with nvml_session() as nvml:
        return inventory_from_nvml(nvml)


def inventory_from_nvml(nvml: Any) -> Inventory:
    """The inventory through an initialised pynvml module."""
    gpus = tuple(_gpu(nvml, index) for index in range(nvml.nvmlDeviceGetCount()))
    return Inventory(
        gpus=gpus,
        driver_version=_text(_optional(nvml, nvml.nvmlSystemGetDriverVersion)),
        cuda_driver_version=_optional(nvml, lambda: int(nvml.nvmlSystemGetCudaDriverVersion())),
    )


def _gpu(nvml: Any, index: int) -> Gpu:
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        return _describe(nvml, handle, index)
    except nvml.NVMLError_GpuIsLost:
        return Gpu(
            index=index, uuid="", name="", pci_bus_id="", memory_total_mib=0, error="gpu_is_lost"
        )
    except nvml.NVMLError as exc:
        return Gpu(index=index, uuid="", name="", pci_bus_id="", memory_total_mib=0, error=str(exc))


def _describe(nvml: Any, handle: Any, index: int) -> Gpu:
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    mig_mode = bool(_optional(nvml, lambda: nvml.nvmlDeviceGetMigMode(handle)[0]))
    utilization = _optional(nvml, lambda: int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    return Gpu(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)) or "",
        name=_text(nvml.nvmlDeviceGetName(handle)) or "",
        pci_bus_id=normalize_pci_bus_id(_text(nvml.nvmlDeviceGetPciInfo(handle).busId) or ""),
        memory_total_mib=int(memory.total) // _MIB,
        memory_used_mib=int(memory.used) // _MIB,
        compute_capability=(int(major), int(minor)),
        utilization_gpu_percent=utilization,
        temperature_c=_sensor(nvml, lambda: int(nvml.nvmlDeviceGetTemperature(handle, 0))),
        power_w=_sensor(nvml, lambda: int(nvml.nvmlDeviceGetPowerUsage(handle)) / 1000),
        mig_mode=mig_mode,
        mig_devices=_mig_devices(nvml, handle) if mig_mode else (),
        processes=_processes(nvml, handle),
    )


def _mig_devices(nvml: Any, handle: Any) -> tuple[MigDevice, ...]:
    found = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError_NotFound:
            continue
        memory = nvml.nvmlDeviceGetMemoryInfo(mig)
        found.append(
            MigDevice(
                uuid=_text(nvml.nvmlDeviceGetUUID(mig)) or "",
                memory_total_mib=int(memory.total) // _MIB,
            )
        )
    return tuple(found)


def _processes(nvml: Any, handle: Any) -> tuple[GpuProcess, ...]:
    """Compute and graphics processes (a simulator renders): one entry per PID."""
    compute = _optional(nvml, lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle)) or []
    graphics = _optional(nvml, lambda: nvml.nvmlDeviceGetGraphicsRunningProcesses(handle)) or []
    return merge_processes(
        (int(proc.pid), int(proc.usedGpuMemory or 0) // _MIB, kind)
        for kind, running in (("C", compute), ("G", graphics))
        for proc in running
    )


def _optional(nvml: Any, query: Callable[[], T]) -> T | None:
    """A query some GPUs or drivers do not support: None instead of an error."""
    try:
        return query()
    except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
        return None


def _sensor(nvml: Any, query: Callable[[], T]) -> T | None:
    """A sensor (the GPU's temperature in °C, NVML_TEMPERATURE_GPU = 0; its power draw,
    read in milliwatts): None where it cannot be read, which never makes the GPU look lost."""
    try:
        return query()
    except nvml.NVMLError:
        return None


def watched_inventory(nvml: Any, *, restart: bool) -> Inventory:
    """The inventory for a watch that keeps its session: an NVML failure (the driver
    reloaded, a call timed out) is an NvmlUnavailableError; with `restart`, NVML is shut
    down and started again first (as after such a failure)."""
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


def persistence_modes(nvml: Any) -> tuple[bool | None, ...]:
    """Each GPU's persistence mode, by NVML index, through an initialised pynvml module;
    None where NVML cannot tell (a lost GPU, a driver without it)."""
    modes: list[bool | None] = []
    for index in range(nvml.nvmlDeviceGetCount()):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            modes.append(bool(nvml.nvmlDeviceGetPersistenceMode(handle)))
        except nvml.NVMLError:
            modes.append(None)
    return tuple(modes)
