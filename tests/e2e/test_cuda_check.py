"""`drgpu cuda-check` from the host, on stacks started by `drgpu up` over the fake driver."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NewRun
from tests.e2e.helpers import SIMULATOR, THREE_GPUS, TRAINER, service, write_env, write_stack
from tests.support.runners import run_drgpu

pytestmark = pytest.mark.docker


def _check(bed: Any, env_file: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    done = run_drgpu("cuda-check", "--env-file", str(env_file), "--json", *args, env=bed.env())
    document = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, document, done.stderr


@pytest.fixture
def started(bed: Any, tmp_path: Path, new_run: NewRun) -> Path:
    project = new_run()
    """A stack up through drgpu: trainer on NVML index 1, simulator on 0, redis without GPU."""
    bed.set_topology(THREE_GPUS)
    stack = write_stack(
        tmp_path,
        {
            "sagemaker": service(bed),
            "robomaker": service(bed),
            "redis": service(bed),
        },
    )
    env_file = write_env(tmp_path, project, trainer="1", simulator="0")
    up = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())
    assert up.returncode == 0, up.stderr
    return env_file


def test_all_gpu_services_see_exactly_their_gpu(bed: Any, started: Path) -> None:
    code, document, stderr = _check(bed, started, "--all")

    assert code == 0, stderr
    results = {r["service"]: r for r in document["results"]}
    assert set(results) == {"sagemaker", "robomaker"}
    assert results["sagemaker"]["seen_nvml"] == [TRAINER]
    assert results["sagemaker"]["seen_cuda"] == [TRAINER]
    assert results["robomaker"]["seen_nvml"] == [SIMULATOR]
    assert all(r["ok"] for r in results.values())


def test_a_service_without_gpu_sees_none(bed: Any, started: Path) -> None:
    code, document, stderr = _check(bed, started, "--service", "redis")

    assert code == 0, stderr
    [result] = document["results"]
    assert result["expected"] == [] and result["seen_nvml"] == [] and result["ok"]


def test_unknown_service_is_a_clear_error(bed: Any, started: Path) -> None:
    code, _, stderr = _check(bed, started, "--service", "nope")

    assert code == 2
    assert stderr.startswith("drgpu: error: no service 'nope'")


def test_a_container_given_another_gpu_is_a_mismatch(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    # Started by hand: the label says TRAINER, the device request gives SIMULATOR.
    bed.set_topology(THREE_GPUS)
    wrong = service(
        bed,
        labels={"drgpu.gpus": TRAINER},
        deploy={
            "resources": {
                "reservations": {
                    "devices": [
                        {"driver": "nvidia", "device_ids": [SIMULATOR], "capabilities": ["gpu"]}
                    ]
                }
            }
        },
    )
    stack = write_stack(tmp_path, {"sagemaker": wrong})
    env_file = write_env(tmp_path, project, trainer="1", simulator="0")
    bed.compose("-p", f"deepracer-{project}", "-f", str(stack), "up", "-d", project_dir=tmp_path)

    code, document, _ = _check(bed, env_file, "--service", "sagemaker")

    assert code == 6
    [result] = document["results"]
    assert not result["ok"]
    assert result["seen_nvml"] == [SIMULATOR]
    assert [f["level"] for f in document["findings"]][:1] == ["fail"]


def test_the_probe_runs_in_an_image_without_drgpu_or_pynvml(bed: Any, started: Path) -> None:
    done = bed.docker(
        "run",
        "--rm",
        "--network",
        "none",
        "-v",
        f"{Path(__file__).parents[2] / 'drgpu' / 'probe.py'}:/probe.py:ro",
        bed.image,
        "python3",
        "-I",
        "/probe.py",
        "--json",
        "--expect",
        "0",
    )
    report = json.loads(done.stdout)
    assert report["expectations"]["met"]
    assert report["nvml"]["available"] is False
