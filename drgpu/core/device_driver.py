"""Which device driver a Compose device request names (DRGPU_DEVICE_DRIVER: `nvidia`, the
toolkit's hook, or `cdi`), and how it names a GPU there (docs/nvidia-stack.md)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from drgpu.core.facts import CDI_GPU_PREFIX, EngineFacts
from drgpu.core.modes import DeviceDriver

UUID_STRATEGY_FIX = (
    "sudo nvidia-ctk cdi generate --device-name-strategy=uuid --device-name-strategy=index"
    " --output=/etc/cdi/nvidia.yaml"
)


@dataclass(frozen=True)
class DriverChoice:
    """The driver device requests name (`nvidia` or `cdi`), and why."""

    driver: DeviceDriver
    why: str


def nvidia_cdi_devices(daemon: EngineFacts) -> tuple[str, ...]:
    """The NVIDIA GPU devices the engine discovered through CDI (`nvidia.com/gpu=...`)."""
    return tuple(
        device.partition(":")[2]
        for device in daemon.discovered_devices
        if device.startswith(f"cdi:{CDI_GPU_PREFIX}")
    )


def choose(setting: DeviceDriver, daemon: EngineFacts | None, hook: bool) -> DriverChoice:
    """The driver for `setting`: `auto` takes `cdi` when the engine discovers NVIDIA CDI
    devices and has neither an nvidia runtime nor the `hook` on PATH, else `nvidia`
    (`daemon` None: the engine was not asked)."""
    if setting is not DeviceDriver.AUTO:
        return DriverChoice(setting, f"DRGPU_DEVICE_DRIVER={setting}")
    if daemon is None:
        return DriverChoice(DeviceDriver.NVIDIA, "the engine was not asked: the toolkit's hook")
    if (runtime := "nvidia" in daemon.runtimes) or hook:
        how = "an nvidia runtime" if runtime else "nvidia-container-runtime-hook"
        return DriverChoice(DeviceDriver.NVIDIA, f"the engine has {how}")
    if cdi := nvidia_cdi_devices(daemon):
        return DriverChoice(
            DeviceDriver.CDI,
            f"the engine discovers {len(cdi)} NVIDIA CDI device(s) and has no nvidia runtime"
            " and no nvidia-container-runtime-hook",
        )
    return DriverChoice(
        DeviceDriver.NVIDIA,
        "no NVIDIA CDI device is discovered and no hook is found: nvidia, the toolkit's default",
    )


def request_ids(driver: DeviceDriver, uuids: Iterable[str]) -> tuple[str, ...]:
    """The `device_ids` of a request for these GPU (or MIG) UUIDs."""
    if driver is DeviceDriver.CDI:
        return tuple(f"{CDI_GPU_PREFIX}{uuid}" for uuid in uuids)
    return tuple(uuids)


def unnamed_in_spec(driver: DeviceDriver, daemon: EngineFacts | None, uuids: Iterable[str]) -> str:
    """A warning when CDI requests name UUIDs the engine's CDI spec does not list (a spec
    generated with index names only); empty when all are there or nothing is known."""
    if driver is not DeviceDriver.CDI or daemon is None or not daemon.discovered_devices:
        return ""
    listed = set(nvidia_cdi_devices(daemon))
    missing = [uuid for uuid in dict.fromkeys(uuids) if f"{CDI_GPU_PREFIX}{uuid}" not in listed]
    if not missing:
        return ""
    return (
        f"the engine's CDI spec names no {CDI_GPU_PREFIX}{missing[0]}"
        + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        + f": containers will not start; regenerate it with UUID names: {UUID_STRATEGY_FIX}"
    )
