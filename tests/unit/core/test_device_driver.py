"""DRGPU_DEVICE_DRIVER: which driver a device request names, from the engine's /info."""

from __future__ import annotations

from dataclasses import replace

from drgpu.core.device_driver import choose, nvidia_cdi_devices, request_ids, unnamed_in_spec
from drgpu.core.facts import EngineFacts
from drgpu.core.modes import DeviceDriver

GPU = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"
MIG = "MIG-a1000000-0000-4000-8000-0000000000a1"
# What Docker 28.2+ lists for a spec of `nvidia-ctk cdi generate` (index and UUID names).
CDI_ONLY = EngineFacts(
    version="28.3.0",
    api_version="1.51",
    runtimes=("io.containerd.runc.v2", "runc"),
    default_runtime="runc",
    discovered_devices=(
        "cdi:nvidia.com/gpu=0",
        f"cdi:nvidia.com/gpu={GPU}",
        "cdi:nvidia.com/gpu=all",
        "cdi:vendor.com/fpga=0",
    ),
)


def test_auto_takes_cdi_on_a_host_with_a_spec_and_no_runtime_or_hook() -> None:
    choice = choose(DeviceDriver.AUTO, CDI_ONLY, hook=False)
    assert choice.driver is DeviceDriver.CDI
    assert "discovers 3 NVIDIA CDI device(s)" in choice.why


def test_auto_keeps_nvidia_where_the_toolkit_serves_it() -> None:
    assert choose(DeviceDriver.AUTO, CDI_ONLY, hook=True).driver is DeviceDriver.NVIDIA
    runtime = replace(CDI_ONLY, runtimes=("nvidia", "runc"))
    choice = choose(DeviceDriver.AUTO, runtime, hook=False)
    assert (choice.driver, choice.why) == (DeviceDriver.NVIDIA, "the engine has an nvidia runtime")
    # Docker before 28.2 lists no discovered devices: nothing says CDI would work
    older = replace(CDI_ONLY, discovered_devices=())
    assert choose(DeviceDriver.AUTO, older, hook=False).driver is DeviceDriver.NVIDIA
    assert choose(DeviceDriver.AUTO, None, hook=False).driver is DeviceDriver.NVIDIA


def test_an_explicit_setting_wins() -> None:
    assert choose(DeviceDriver.CDI, None, hook=True).driver is DeviceDriver.CDI
    assert choose(DeviceDriver.NVIDIA, CDI_ONLY, hook=False).driver is DeviceDriver.NVIDIA


def test_cdi_names_gpus_and_mig_devices_by_uuid() -> None:
    assert request_ids(DeviceDriver.CDI, [GPU, MIG]) == (
        f"nvidia.com/gpu={GPU}",
        f"nvidia.com/gpu={MIG}",
    )
    assert request_ids(DeviceDriver.NVIDIA, [GPU, MIG]) == (GPU, MIG)
    assert nvidia_cdi_devices(CDI_ONLY)[1] == f"nvidia.com/gpu={GPU}"


def test_a_spec_without_uuid_names_is_a_warning_naming_the_fix() -> None:
    assert unnamed_in_spec(DeviceDriver.CDI, CDI_ONLY, [GPU]) == ""
    warning = unnamed_in_spec(DeviceDriver.CDI, CDI_ONLY, [GPU, MIG])
    assert f"names no nvidia.com/gpu={MIG}" in warning
    assert "--device-name-strategy=uuid" in warning
    assert unnamed_in_spec(DeviceDriver.NVIDIA, CDI_ONLY, [MIG]) == ""
    assert unnamed_in_spec(DeviceDriver.CDI, None, [MIG]) == ""
