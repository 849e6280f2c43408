"""`drgpu doctor` end to end: the private engine with the stub NVIDIA hook, a second engine
without it (a host without the container toolkit), and NVML that fails to start."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import started_bed
from tests.e2e.helpers import THREE_GPUS
from tests.support.runners import run_drgpu

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
NEW_CUDA_IMAGE = "drgpu-test/cuda:12.6"  # like a DeepRacer simapp 6.x image
OLD_CUDA_IMAGE = "drgpu-test/cuda:11.4"
IMAGE_ENV = {
    NEW_CUDA_IMAGE: 'NVIDIA_REQUIRE_CUDA="cuda>=12.6 brand=tesla,driver>=470,driver<471"',
    OLD_CUDA_IMAGE: "CUDA_VERSION=11.4.3",
}


@pytest.fixture(scope="module")
def cuda_images(bed: Any) -> None:
    """Two images derived from the test image, stating the CUDA they need."""
    for name, env in IMAGE_ENV.items():
        if bed.docker("image", "inspect", name, check=False).returncode == 0:
            continue
        created = bed.docker("create", bed.image, "true").stdout.strip()
        try:
            bed.docker("commit", "--change", f"ENV {env}", created, name)
        finally:
            bed.docker("rm", created)


@pytest.fixture(scope="module")
def bare_engine(bed: Any) -> Iterator[str]:
    """DOCKER_HOST of a second private engine without the NVIDIA hook on its PATH."""
    with started_bed("drgpu-bare-", TESTBED_NO_HOOK="1") as bare:
        yield bare.docker_host


def settings(tmp_path: Path, **values: str) -> Path:
    path = tmp_path / "system.env"
    path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    return path


def checks_of(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert "Traceback" not in done.stderr, done.stderr
    document = json.loads(done.stdout)
    assert document["ok"] is (done.returncode == 0)
    return list(document["findings"])


def statuses(checks: list[dict[str, Any]]) -> dict[str, str]:
    """Status per check id; image checks as image-cuda:<image>."""
    return {
        f"{c['kind']}:{c['subject']}" if c["subject"] != c["kind"] else c["kind"]: c["level"]
        for c in checks
    }


def test_a_host_whose_engine_serves_device_requests_passes(
    bed: Any, tmp_path: Path, cuda_images: None
) -> None:
    topology = json.loads(json.dumps(THREE_GPUS))
    topology["gpus"][0]["persistence_mode"] = False  # the L4, NVML index 2
    bed.set_topology(topology)
    env_file = settings(
        tmp_path, DRGPU_SAGEMAKER_IMAGE=OLD_CUDA_IMAGE, DRGPU_ROBOMAKER_IMAGE=bed.image
    )

    # --probe starts the simulator's image, as Compose resolves the stack.
    done = run_drgpu("doctor", "--env-file", str(env_file), "--probe", "--json", env=bed.env())

    assert done.returncode == 0, done.stderr
    checks = checks_of(done)
    assert statuses(checks) == {
        "settings": "ok",
        "nvml": "ok",
        "gpus": "ok",
        "persistence": "warn",
        "docker": "ok",
        "device-requests": "ok",
        "device-driver": "ok",
        "default-runtime": "ok",
        "compose": "ok",
        f"image-cuda:{bed.image}": "ok",
        f"image-cuda:{OLD_CUDA_IMAGE}": "ok",
    }
    by_id = {c["kind"]: c for c in checks}
    assert by_id["nvml"]["message"] == "NVML loads: driver 550.54.14, CUDA 12.4, 3 GPU(s)"
    assert "off on GPU 2" in by_id["persistence"]["message"]
    assert bed.image in by_id["device-requests"]["message"]

    table = run_drgpu("doctor", "--env-file", str(env_file), env=bed.env())
    assert table.returncode == 0, table.stderr
    assert "fix: sudo nvidia-smi -pm 1" in table.stdout


def test_an_image_that_needs_a_newer_driver_fails(
    bed: Any, tmp_path: Path, cuda_images: None
) -> None:
    bed.set_topology(THREE_GPUS)
    env_file = settings(
        tmp_path, DRGPU_SAGEMAKER_IMAGE=bed.image, DRGPU_ROBOMAKER_IMAGE=OLD_CUDA_IMAGE
    )

    done = run_drgpu(
        "doctor", "--env-file", str(env_file), "--image", NEW_CUDA_IMAGE, "--json", env=bed.env()
    )

    assert done.returncode == 6
    checks = checks_of(done)
    (failed,) = [c for c in checks if c["level"] == "fail"]
    assert (failed["kind"], failed["subject"]) == ("image-cuda", NEW_CUDA_IMAGE)
    assert "needs CUDA 12.6, the driver (550.54.14) supports CUDA 12.4" in failed["message"]
    assert ">= 560" in failed["fix"]
    # Without --probe the stub hook leaves no trace doctor can see: a warning, not a failure.
    assert statuses(checks)["device-requests"] == "warn"
    assert done.stderr.splitlines()[0] == "drgpu: error: 1 check(s) failed: image-cuda"


def test_an_engine_without_the_toolkit_hook_fails_the_probe(
    bed: Any, tmp_path: Path, bare_engine: str
) -> None:
    bed.set_topology(THREE_GPUS)
    env_file = settings(tmp_path, DRGPU_ROBOMAKER_IMAGE=bed.image)

    done = run_drgpu(
        "doctor",
        "--env-file",
        str(env_file),
        "--probe",
        "--json",
        env=bed.env(DOCKER_HOST=bare_engine),
    )

    assert done.returncode == 6
    checks = checks_of(done)
    (probe,) = [c for c in checks if c["kind"] == "device-requests"]
    assert probe["level"] == "fail"
    assert "could not select device driver" in probe["message"]
    assert "missing, or dockerd was not restarted" in probe["message"]
    assert "restart dockerd" in probe["fix"]
    assert statuses(checks)["docker"] == "ok"
    assert "hint: install the NVIDIA container toolkit" in done.stderr


@pytest.mark.parametrize(
    ("init_error", "says", "fix"),
    [
        ("driver_not_loaded", "not loaded", "modprobe"),
        ("library_not_found", "NVML library not found", "install the NVIDIA driver"),
        ("no_permission", "no permission", "/dev/nvidia"),
        ("lib_rm_version_mismatch", "different versions", "reboot"),
    ],
)
def test_nvml_that_fails_to_start_fails_with_its_fix(
    bed: Any, tmp_path: Path, init_error: str, says: str, fix: str
) -> None:
    broken = tmp_path / "topology.json"
    broken.write_text(json.dumps({"init_error": init_error, "gpus": THREE_GPUS["gpus"]}))
    env_file = settings(tmp_path, DRGPU_SAGEMAKER_IMAGE=bed.image)

    done = run_drgpu(
        "doctor", "--env-file", str(env_file), "--json", env=bed.env(FAKE_NVML_TOPOLOGY=broken)
    )

    assert done.returncode == 6
    checks = checks_of(done)
    nvml = next(c for c in checks if c["kind"] == "nvml")
    assert nvml["level"] == "fail"
    assert says in nvml["message"]
    assert fix in nvml["fix"]
    assert "gpus" not in statuses(checks) and "persistence" not in statuses(checks)
    assert statuses(checks)["docker"] == "ok"

    status = run_drgpu("status", env=bed.env(FAKE_NVML_TOPOLOGY=broken))
    assert status.returncode == 4
    assert status.stderr.startswith("drgpu: error: ")
    assert fix in status.stderr


def test_a_bad_settings_file_is_a_failed_check_not_a_usage_error(bed: Any, tmp_path: Path) -> None:
    bed.set_topology(THREE_GPUS)
    env_file = settings(tmp_path, DR_WORKERS="zero", DRGPU_SAGEMAKER_IMAGE=bed.image)

    done = run_drgpu("doctor", "--env-file", str(env_file), "--json", env=bed.env())

    assert done.returncode == 6
    (failed,) = [c for c in checks_of(done) if c["level"] == "fail"]
    assert failed["kind"] == "settings"
    assert "DR_WORKERS" in failed["message"]


def test_an_unreachable_engine_fails_and_skips_what_needs_it(bed: Any, tmp_path: Path) -> None:
    bed.set_topology(THREE_GPUS)
    env_file = settings(tmp_path)

    done = run_drgpu(
        "doctor",
        "--env-file",
        str(env_file),
        "--probe",
        "--json",
        env=bed.env(DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock"),
    )

    assert done.returncode == 6
    found = statuses(checks_of(done))
    assert found["docker"] == "fail"
    assert not {"device-requests", "default-runtime"} & set(found)
    assert not any(key.startswith("image-cuda") for key in found)
