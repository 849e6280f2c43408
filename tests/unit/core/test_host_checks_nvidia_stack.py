"""doctor's checks of today's NVIDIA stack: which device driver the requests name (CDI or
the toolkit's hook), the toolkit's version and mode for Swarm, and the daemon-reload risk."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from drgpu.core.facts import EngineFacts
from drgpu.core.host_checks import (
    PASS,
    WARN,
    HostFacts,
    check_daemon_reload,
    check_device_driver,
    check_toolkit,
    check_x_server,
)
from drgpu.core.model import Gpu, GpuProcess, Inventory
from drgpu.core.settings import config_from_values
from drgpu.core.toolkit import ToolkitFacts

GPU = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"
INVENTORY = Inventory(gpus=(Gpu(0, GPU, "Tesla M40", "00000000:81:00.0", 22912),))


def host(settings: dict[str, str] | None = None, **changes: Any) -> HostFacts:
    config = config_from_values({"DR_RUN_ID": "0", **(settings or {})}, {})
    return HostFacts(Path("system.env"), config, **changes)


DAEMON = EngineFacts(
    version="28.3.0",
    api_version="1.51",
    runtimes=("runc",),
    default_runtime="runc",
    discovered_devices=("cdi:nvidia.com/gpu=0", f"cdi:nvidia.com/gpu={GPU}"),
    cgroup_driver="systemd",
)
CDI_HOST: dict[str, Any] = {"daemon": DAEMON, "inventory": INVENTORY}
HOOK_HOST: dict[str, Any] = {
    "daemon": replace(DAEMON, discovered_devices=()),
    "hook_on_path": True,
    "inventory": INVENTORY,
}


def only(checks: list) -> tuple[str, str, str | None]:  # type: ignore[type-arg]
    [check] = checks
    return check.level, check.message, check.fix


def test_doctor_says_which_driver_and_why() -> None:
    status, summary, _ = only(check_device_driver(host(**CDI_HOST)))
    assert status == PASS
    assert summary.startswith("device requests use driver cdi: the engine discovers 2 NVIDIA")
    status, summary, _ = only(check_device_driver(host(**HOOK_HOST)))
    assert (status, summary) == (
        PASS,
        "device requests use driver nvidia: the engine has nvidia-container-runtime-hook",
    )


def test_a_forced_driver_that_cannot_work_here_warns() -> None:
    forced = host({"DRGPU_DEVICE_DRIVER": "nvidia"}, **CDI_HOST)
    status, summary, fix = only(check_device_driver(forced))
    assert status == WARN and "could not select device driver" in summary
    assert fix == "set DRGPU_DEVICE_DRIVER=auto (or cdi) in system.env"
    cdi = host({"DRGPU_DEVICE_DRIVER": "cdi"}, **HOOK_HOST)
    status, summary, _ = only(check_device_driver(cdi))
    assert status == WARN and "discovers no NVIDIA CDI device" in summary


def test_a_spec_with_index_names_only_warns() -> None:
    index_only = replace(DAEMON, discovered_devices=("cdi:nvidia.com/gpu=0",))
    status, summary, _ = only(check_device_driver(host(daemon=index_only, inventory=INVENTORY)))
    assert status == WARN and f"names no nvidia.com/gpu={GPU}" in summary


def test_toolkit_1_18_in_jit_cdi_mode_warns_a_swarm_stack() -> None:
    jit = ToolkitFacts(version=(1, 18, 0), mode="auto")
    swarm = {"DR_DOCKER_STYLE": "swarm"}
    status, summary, _ = only(check_toolkit(host(swarm, toolkit=jit))[:1])
    assert status == WARN
    assert "toolkit 1.18.0 runs in mode jit-cdi" in summary and 'mode = "legacy"' in summary
    assert only(check_toolkit(host(toolkit=jit))[:1])[0] == PASS  # Compose: not its concern
    for fine in (replace(jit, mode="legacy"), replace(jit, version=(1, 19, 0))):
        assert only(check_toolkit(host(swarm, toolkit=fine))[:1])[0] == PASS
    unknown = ToolkitFacts(None, None, config_found=False)
    assert check_toolkit(host(swarm, toolkit=unknown)) == []


NODES = {"/dev/nvidia0": (195, 0), "/dev/nvidiactl": (195, 255), "/dev/nvidia-uvm": (508, 0)}


def test_the_daemon_reload_risk_is_named_with_its_fix() -> None:
    bare: dict[str, Any] = {"device_nodes": NODES, "char_links": frozenset({"1:3", "195:0"})}
    status, summary, fix = only(check_daemon_reload(host(**HOOK_HOST, **bare)))
    assert status == WARN
    assert "no link for /dev/nvidiactl, /dev/nvidia-uvm" in summary
    assert fix is not None and "nvidia-ctk system create-dev-char-symlinks --create-all" in fix
    linked: dict[str, Any] = {
        "device_nodes": NODES,
        "char_links": frozenset({"195:0", "195:255", "508:0"}),
    }
    assert only(check_daemon_reload(host(**HOOK_HOST, **linked)))[0] == PASS
    cgroupfs = replace(DAEMON, cgroup_driver="cgroupfs")
    assert only(check_daemon_reload(host(daemon=cgroupfs, hook_on_path=True, **bare)))[0] == PASS
    status, summary, _ = only(check_daemon_reload(host(**CDI_HOST, **bare)))
    assert status == PASS and "through CDI" in summary
    assert check_daemon_reload(host(**HOOK_HOST)) == []
    silent = replace(DAEMON, cgroup_driver="")
    assert check_daemon_reload(host(daemon=silent, hook_on_path=True, **bare)) == []


def test_doctor_warns_where_jit_cdi_lets_egl_reach_every_gpu() -> None:
    [_, warning] = check_toolkit(host(toolkit=ToolkitFacts(version=(1, 19, 0), mode="auto")))
    assert warning.level == WARN and warning.kind == "toolkit-egl"
    assert "does not limit EGL/Vulkan" in warning.message
    assert len(check_toolkit(host(toolkit=ToolkitFacts(version=(1, 20, 0), mode="auto")))) == 1
    assert check_toolkit(host()) == []


def test_doctor_names_the_x_servers_gpu_and_warns_where_the_simulator_has_another() -> None:
    xorg = (GpuProcess(pid=990, used_memory_mib=30, kind="G"),)
    gpus = (
        Gpu(0, "GPU-a", "NVIDIA GeForce GTX 1650", "00000000:01:00.0", 4096, processes=xorg),
        Gpu(1, "GPU-b", "NVIDIA GeForce RTX 3090", "00000000:02:00.0", 24576),
    )
    inventory = Inventory(gpus=gpus, cuda_order=(1, 0))
    x_server = {"DR_HOST_X": "True", "DR_ROBOMAKER_CUDA_DEVICES": "1"}
    [warning] = check_x_server(host(x_server, inventory=inventory))
    assert warning.level == WARN and warning.kind == "x-server"
    assert "the X server renders on GPU 0 (NVIDIA GeForce GTX 1650: graphics PID 990)" in (
        warning.message
    )
    assert "not the simulator's GPU 1 (NVIDIA GeForce RTX 3090)" in warning.message
    # DRGPU_INDEX_ORDER=cuda: CUDA's 1 is the GTX 1650 (fastest first), the X server's GPU.
    cuda = {**x_server, "DRGPU_INDEX_ORDER": "cuda"}
    [named] = check_x_server(host(cuda, inventory=inventory))
    assert named.level == PASS and "GPU 0 (NVIDIA GeForce GTX 1650" in named.message
    assert check_x_server(host(inventory=inventory)) == []  # no DR_HOST_X: not doctor's concern
