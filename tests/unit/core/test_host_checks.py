"""Each doctor check, judged from gathered facts (no NVML, no engine, no Compose)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from drgpu.core.facts import EngineFacts, ImageFacts
from drgpu.core.findings import Finding, failed
from drgpu.core.host_checks import (
    FAIL,
    PASS,
    WARN,
    HostFacts,
    check_compose,
    check_default_runtime,
    check_device_requests,
    check_docker,
    check_drfc_swarm,
    check_image_cuda,
    check_nvml,
    check_settings,
    cuda_text,
    min_driver,
    parse_version,
    required_cuda,
    run_checks,
    stack_images,
)
from drgpu.core.model import Gpu, GpuHealth, Inventory
from drgpu.core.settings import config_from_values
from drgpu.ui.documents import document


def gpu(index: int, error: str | None = None) -> Gpu:
    return Gpu(
        index=index,
        uuid=f"GPU-{index}" if error is None else "",
        name="Tesla T4",
        pci_bus_id=f"00000000:0{index + 1}:00.0",
        memory_total_mib=15360,
        error=error,
    )


def host(**changes: Any) -> HostFacts:
    return HostFacts(Path("system.env"), **changes)


TWO_GPUS = Inventory(gpus=(gpu(0), gpu(1)), driver_version="550.54.14", cuda_driver_version=12040)
NVML: dict[str, Any] = {"inventory": TWO_GPUS, "persistence": (True, True)}
NVML_ERROR = (
    "the NVIDIA driver is installed but not loaded",
    "load the kernel module (`sudo modprobe nvidia`) or reboot after a driver update",
)
NO_NVML: dict[str, Any] = {"errors": {"nvml": NVML_ERROR}}


def daemon(**changes: object) -> EngineFacts:
    fields: dict[str, object] = {
        "version": "27.3.1",
        "api_version": "1.47",
        "runtimes": ("io.containerd.runc.v2", "runc"),
        "default_runtime": "runc",
        "discovered_devices": (),
    }
    fields.update(changes)
    return EngineFacts(**fields)  # type: ignore[arg-type]


DOCKER: dict[str, Any] = {"daemon": daemon()}
DOCKER_ERROR = ("cannot reach the Docker engine", "is dockerd running?")
NO_DOCKER: dict[str, Any] = {"errors": {"docker": DOCKER_ERROR}}


def image(name: str, **env: str) -> tuple[str, ImageFacts]:
    return name, ImageFacts(name=name, id="sha256:1", environment=env)


def only(checks: list[Finding]) -> Finding:
    assert len(checks) == 1, checks
    return checks[0]


# --- settings, NVML, GPUs --------------------------------------------------------------------


def test_settings_pass_or_fail_with_the_config_error_and_its_hint() -> None:
    run_3 = host(config=config_from_values({"DR_RUN_ID": "3"}, {}))
    assert only(check_settings(run_3)).message == "system.env: run 3"
    error = "system.env:2: DR_WORKERS: 'x' is not a whole number from 1 to 64"
    failed = only(check_settings(host(errors={"settings": (error, None)})))
    assert (failed.level, failed.kind) == (FAIL, "settings")
    assert "DR_WORKERS" in failed.message


def test_facts_never_gathered_fail_as_not_read() -> None:
    judged = run_checks(HostFacts(Path("system.env")))
    assert {(f.kind, f.level) for f in judged} >= {("settings", FAIL), ("nvml", FAIL)}
    assert only(check_settings(host())).message == "not read"


def test_nvml_passes_with_driver_and_cuda_versions() -> None:
    [check, *_] = check_nvml(host(**NVML))
    assert check.level == PASS
    assert check.message == "NVML loads: driver 550.54.14, CUDA 12.4, 2 GPU(s)"


def test_nvml_failure_carries_the_hint() -> None:
    check = only(check_nvml(host(**NO_NVML)))
    assert check.level == FAIL
    assert "not loaded" in check.message
    assert check.fix is not None and "modprobe" in check.fix


def test_nvml_without_gpus_warns() -> None:
    assert only(check_nvml(host(inventory=Inventory(gpus=())))).level == WARN


def test_a_lost_gpu_fails() -> None:
    nvml = host(inventory=Inventory(gpus=(gpu(0, "gpu_is_lost"), gpu(1))))
    [_, check] = check_nvml(nvml)
    assert (check.kind, check.level, check.message) == ("gpus", FAIL, "GPU 0 is lost (gpu_is_lost)")
    assert check_nvml(host(**NVML))[1].level == PASS


def test_persistence_off_warns_and_unknown_is_skipped() -> None:
    [*_, off] = check_nvml(host(inventory=TWO_GPUS, persistence=(True, False)))
    assert (off.kind, off.level) == ("persistence", WARN)
    assert "off on GPU 1" in off.message
    assert off.fix is not None and "nvidia-smi -pm 1" in off.fix
    unknown = check_nvml(host(inventory=TWO_GPUS, persistence=(None, None)))
    assert [c.kind for c in unknown] == ["nvml", "gpus"]
    assert check_nvml(host(**NVML))[-1].level == PASS


def test_a_gpu_up_would_refuse_fails_and_a_slowed_one_warns() -> None:
    """As `up` judges them (core.faults): pages pending a reset, and clocks held down."""
    health = (GpuHealth(0, "GPU-a", retired_pending=True), GpuHealth(1, "GPU-b", throttle=0x40))
    found = [
        c for c in check_nvml(host(inventory=TWO_GPUS, health=health)) if c.kind == "gpu-health"
    ]
    assert [(c.level, c.message) for c in found] == [
        (FAIL, "GPU 0: retired pages pending (reset the GPU)"),
        (WARN, "GPU 1: clocks held down (hardware thermal slowdown)"),
    ]
    assert found[0].fix is not None and "`up` refuses it" in found[0].fix


# --- Docker, device requests, runtimes -------------------------------------------------------


def test_docker_reachable_passes_with_its_version() -> None:
    assert only(check_docker(host(**DOCKER))).message == "Docker engine 27.3.1 (API 1.47)"
    assert only(check_docker(host(**NO_DOCKER))).level == FAIL
    assert only(check_docker(host(daemon=daemon(version="18.09.1")))).level == FAIL


def test_unreachable_docker_skips_what_depends_on_it() -> None:
    assert check_device_requests(host(**NO_DOCKER)) == []
    assert check_default_runtime(host(**NO_DOCKER)) == []
    assert check_image_cuda(host(**NVML, **NO_DOCKER, images=dict([image("x")]))) == []


PROBED: dict[str, Any] = {**DOCKER, "images": dict([image("img")]), "probe_image": "img"}


def test_device_request_probe_that_ran_passes() -> None:
    check = only(check_device_requests(host(**PROBED)))
    assert (check.kind, check.level) == ("device-requests", PASS)


def test_could_not_select_device_driver_means_toolkit_missing_or_dockerd_not_restarted() -> None:
    error = 'could not select device driver "nvidia" with capabilities: [[gpu]]'
    check = only(check_device_requests(host(**PROBED, probe_error=error)))
    assert check.level == FAIL
    assert "toolkit is missing, or dockerd was not restarted" in check.message
    assert check.fix is not None and "restart" in check.fix


def test_a_probe_image_that_is_not_there_warns() -> None:
    check = only(check_device_requests(host(**DOCKER, probe_image="img:1")))
    assert check.level == WARN
    assert check.fix == "docker pull img:1, or name a local image with --image"


def test_a_probe_refused_for_cuda_points_at_the_driver() -> None:
    error = "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.6"
    check = only(check_device_requests(host(**PROBED, probe_error=error)))
    assert check.level == FAIL
    assert check.fix is not None and "driver is too old" in check.fix


@pytest.mark.parametrize(
    ("facts", "status"),
    [
        (host(daemon=daemon()), WARN),
        (host(daemon=daemon(runtimes=("nvidia", "runc"))), PASS),
        (host(daemon=daemon(discovered_devices=("cdi:nvidia.com/gpu=0",))), PASS),
        (host(daemon=daemon(), hook_on_path=True), PASS),
    ],
    ids=["no-sign", "nvidia-runtime", "cdi-devices", "hook"],
)
def test_without_a_probe_device_requests_are_judged_from_signs(
    facts: HostFacts, status: str
) -> None:
    assert only(check_device_requests(facts)).level == status


def test_the_nvidia_default_runtime_with_an_all_gpus_image_warns() -> None:
    nvidia = daemon(default_runtime="nvidia")
    greedy = image("deepracer-sagemaker:5.3.0-gpu", NVIDIA_VISIBLE_DEVICES="all")
    check = only(check_default_runtime(host(daemon=nvidia, images=dict([greedy, image("redis")]))))
    assert check.level == WARN
    assert "deepracer-sagemaker:5.3.0-gpu" in check.message
    assert check.fix is not None and "default-runtime" in check.fix
    assert (
        only(check_default_runtime(host(daemon=nvidia, images=dict([image("redis")])))).level
        == PASS
    )
    runc = only(check_default_runtime(host(**DOCKER, images=dict([greedy]))))
    assert runc.message == "the default runtime is runc"


# --- Compose ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "status"),
    [
        ("2.24.3\n", FAIL),
        ("v2.24.4\n", WARN),
        ("2.29.7\n", WARN),
        ("2.30.0\n", PASS),
        ("2.27.0-desktop.2\n", WARN),
        ("5.6.1\n", PASS),
        ("nonsense\n", WARN),
    ],
)
def test_compose_version_gates(output: str, status: str) -> None:
    assert only(check_compose(host(compose_version=output))).level == status


def test_missing_compose_fails() -> None:
    check = only(check_compose(host(errors={"compose": ("no Docker Compose found", None)})))
    assert check.level == FAIL
    assert check.fix is not None and "2.24.4" in check.fix


# --- the driver's CUDA against each image ----------------------------------------------------


def test_an_image_needing_a_newer_cuda_fails_with_the_driver_it_needs() -> None:
    simapp = image(
        "awsdeepracercommunity/deepracer-simapp:6.0.1-gpu",
        NVIDIA_REQUIRE_CUDA="cuda>=12.6 brand=tesla,driver>=470,driver<471",
        CUDA_VERSION="12.6.3",
    )
    check = only(check_image_cuda(host(**NVML, **DOCKER, images=dict([simapp]))))
    assert check.level == FAIL
    assert "needs CUDA 12.6, the driver (550.54.14) supports CUDA 12.4" in check.message
    assert check.fix is not None and ">= 560.28" in check.fix
    assert check.subject == simapp[0]


def test_an_image_within_the_drivers_cuda_passes() -> None:
    sagemaker = image(
        "sagemaker:5.3.0-gpu", NVIDIA_REQUIRE_CUDA="cuda>=11.4", CUDA_VERSION="11.4.3"
    )
    check = only(check_image_cuda(host(**NVML, **DOCKER, images=dict([sagemaker]))))
    assert check.level == PASS
    plain = dict([image("c", CUDA_VERSION="12.4.1")])
    assert only(check_image_cuda(host(**NVML, **DOCKER, images=plain))).level == PASS


def test_cuda_version_alone_is_the_requirement() -> None:
    images = dict([image("c", CUDA_VERSION="12.8.0")])
    check = only(check_image_cuda(host(**NVML, **DOCKER, images=images)))
    assert check.level == FAIL
    assert check.fix is not None and ">= 570.26" in check.fix


def test_a_forward_compatibility_clause_for_this_driver_warns() -> None:
    compat = image("c", NVIDIA_REQUIRE_CUDA="cuda>=12.6 brand=tesla,driver>=550,driver<551")
    assert only(check_image_cuda(host(**NVML, **DOCKER, images=dict([compat])))).level == WARN


def test_images_without_requirement_absent_or_disabled() -> None:
    images = dict(
        [
            image("plain"),
            ("absent:1", None),
            image("off", NVIDIA_REQUIRE_CUDA="cuda>=13.0", NVIDIA_DISABLE_REQUIRE="true"),
        ]
    )
    checks = check_image_cuda(host(**NVML, **DOCKER, images=images))
    assert [c.level for c in checks] == [PASS, WARN, PASS]
    assert checks[1].fix is not None and "docker pull absent:1" in checks[1].fix


def test_without_nvml_the_cuda_need_is_unknown() -> None:
    images = dict([image("c", CUDA_VERSION="12.1.0")])
    check = only(check_image_cuda(host(**NO_NVML, **DOCKER, images=images)))
    assert check.level == WARN


# --- parsing helpers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("2.29.1", (2, 29, 1)),
        ("v2.24.4\n", (2, 24, 4)),
        ("Docker Compose version v5.6.1", (5, 6, 1)),
        ("20.10.24+dfsg1", (20, 10, 24)),
        ("12.6", (12, 6, 0)),
        ("none", None),
    ],
)
def test_parse_version(text: str, version: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == version


@pytest.mark.parametrize(
    ("env", "needed"),
    [
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=11.4 brand=tesla,driver>=418,driver<419"}, (11, 4)),
        ({"NVIDIA_REQUIRE_CUDA": "brand=tesla,driver>=418 cuda>=12.2"}, (12, 2)),
        ({"CUDA_VERSION": "12.6.3"}, (12, 6)),
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.1", "CUDA_VERSION": "12.6.3"}, (12, 1)),
        ({"PATH": "/usr/bin"}, None),
    ],
)
def test_required_cuda(env: dict[str, str], needed: tuple[int, int] | None) -> None:
    assert required_cuda(env) == needed


def test_cuda_text_and_min_driver() -> None:
    assert cuda_text(12040) == "12.4"
    assert cuda_text(11080) == "11.8"
    assert cuda_text(None) == "?"
    assert min_driver((12, 6)) == "560.28"
    assert min_driver((12, 7)) == "570.26"  # there was no 12.7: the next release's driver
    assert min_driver((99, 0)) == "the first driver of CUDA 99.0"


def test_stack_images_follow_the_base_compose_file() -> None:
    assert stack_images({}) == (
        "awsdeepracercommunity/deepracer-sagemaker:5.3.0-gpu",
        "awsdeepracercommunity/deepracer-simapp:5.3.3-gpu",
    )
    assert stack_images({"DR_SAGEMAKER_IMAGE": "5.2.1-gpu", "DR_SIMAPP_VERSION": "6.0.1-gpu"}) == (
        "awsdeepracercommunity/deepracer-sagemaker:5.2.1-gpu",
        "awsdeepracercommunity/deepracer-simapp:6.0.1-gpu",
    )
    assert stack_images({"DRGPU_SAGEMAKER_IMAGE": "a:1", "DRGPU_ROBOMAKER_IMAGE": "b:2"}) == (
        "a:1",
        "b:2",
    )


# --- the whole checklist ---------------------------------------------------------------------


def test_a_healthy_host_passes_every_check_in_order() -> None:
    facts = host(
        config=config_from_values({"DR_RUN_ID": "0"}, {}),
        **NVML,
        **DOCKER,
        compose_version="2.32.4\n",
        images=dict([image("sagemaker", CUDA_VERSION="11.4.3")]),
        probe_image="sagemaker",
    )
    checks = run_checks(facts)
    assert [c.kind for c in checks] == [
        "settings",
        "nvml",
        "gpus",
        "persistence",
        "docker",
        "device-requests",
        "device-driver",
        "default-runtime",
        "compose",
        "image-cuda",
    ]
    assert all(c.level == PASS for c in checks), checks
    assert not failed(checks)
    assert document(checks)["ok"] is True


def test_any_failure_makes_the_checklist_fail() -> None:
    facts = host(
        config=config_from_values({"DR_RUN_ID": "0"}, {}),
        errors={
            "nvml": NVML_ERROR,
            "docker": DOCKER_ERROR,
            "compose": ("no Docker Compose found", None),
        },
    )
    checks = run_checks(facts)
    assert [(c.kind, c.level) for c in checks] == [
        ("settings", PASS),
        ("nvml", FAIL),
        ("docker", FAIL),
        ("compose", FAIL),
    ]
    doc = document(checks)
    assert doc["ok"] is False
    assert doc["findings"][1]["fix"].startswith("load the kernel module")


def test_resolved_images_list_each_once_and_probe_the_simulators() -> None:
    from drgpu.core.host_checks import resolved_images

    services = {
        "rl_coach": {"image": "simapp:6"},
        "robomaker": {"image": "simapp:6"},
        "redis": {"image": "redis:7"},
        "builder": {"build": "."},
    }
    assert resolved_images(services) == (("simapp:6", "redis:7"), "simapp:6")
    assert resolved_images({"sagemaker": {"image": "a"}, "redis": {"image": "b"}}) == (
        ("a", "b"),
        "a",
    )
    assert resolved_images({}) == ((), None)


def test_drfc_swarm_checks_only_in_swarm_style_each_problem_with_its_fix() -> None:
    assert check_drfc_swarm(host()) == []
    assert only(check_drfc_swarm(host(drfc_swarm=()))).level == PASS
    fix = "docker node update --label-add Robomaker=true n1"
    failed = only(check_drfc_swarm(host(drfc_swarm=(("no Robomaker node", fix),))))
    assert (failed.kind, failed.level, failed.fix) == ("drfc-swarm", FAIL, fix)
    no_swarm = only(check_drfc_swarm(host(errors={"drfc-swarm": ("in no swarm", None)})))
    assert (no_swarm.level, no_swarm.fix) == (FAIL, "docker swarm init")
