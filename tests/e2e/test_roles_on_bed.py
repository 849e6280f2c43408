"""A stack that is not DeepRacer, end to end on the bed's mixed box: examples/learner-carla
with the bed's local image in every service (no network), roles from its compose file."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import NewRun
from tests.e2e.helpers import container_of, containers, env_of, nvml_inside, service
from tests.support.runners import run_drgpu

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "learner-carla"
INVENTORY = REPO / "examples" / "inventories" / "gtx1650-rtx3090-m40.json"
GTX1650 = "GPU-1650beef-2c3d-4e5f-8a9b-0c1d2e3f4a5b"
RTX3090 = "GPU-3090c0de-5a1b-4c2d-9e3f-a4b5c6d7e8f9"
M40 = "GPU-40e7a5c1-9d2b-4f6a-8c3e-1b2d3f4a5c6e"
INDEX = {GTX1650: 0, RTX3090: 1, M40: 2}
PLANNED = {"learner": M40, "carla": GTX1650, "evaluator": RTX3090}
ROLE_KEYS = ("labels", "x-drgpu")


def mixed_box(processes: dict[str, list[int]] | None = None) -> dict[str, Any]:
    """The fake driver's topology: the example inventory, with these PIDs on these GPUs."""
    data = json.loads(INVENTORY.read_text())
    gpus = []
    for gpu in data["gpus"]:
        gpus.append(
            {
                key: copy.deepcopy(gpu[key])
                for key in ("uuid", "name", "pci_bus_id", "memory_total_mib", "compute_capability")
            }
            | {
                "processes": [
                    {"pid": pid, "used_memory_mib": 256}
                    for pid in (processes or {}).get(gpu["uuid"], [])
                ]
            }
        )
    return {"driver_version": data["driver_version"], "gpus": gpus}


@pytest.fixture
def example(bed: Any, tmp_path: Path, new_run: NewRun) -> tuple[Path, Path]:
    project = new_run()
    """The example's compose file and system.env, every service on the bed's image."""
    document = yaml.safe_load((EXAMPLE / "docker-compose.yml").read_text())
    services = {
        name: service(bed, **{key: body[key] for key in ROLE_KEYS if key in body})
        for name, body in document["services"].items()
    }
    stack = tmp_path / "docker-compose.yml"
    stack.write_text(yaml.safe_dump({"services": services}, sort_keys=False))
    settings = (
        (EXAMPLE / "system.env").read_text().replace("DR_RUN_ID=carla", f"DR_RUN_ID={project}")
    )
    env_file = tmp_path / "system.env"
    env_file.write_text(settings)
    return stack, env_file


def test_learner_carla_evaluator_redis_get_exactly_their_gpus_and_are_verified(
    bed: Any, example: tuple[Path, Path], new_run: NewRun
) -> None:
    project = new_run()
    stack, env_file = example
    bed.set_topology(mixed_box())
    bed.clear_records()
    name = f"deepracer-{project}"
    args = ("--env-file", str(env_file), "-f", str(stack))

    planned = run_drgpu("plan", "--json", *args, env=bed.env())
    assert planned.returncode == 0, planned.stderr
    services = json.loads(planned.stdout)["services"]
    assert {s: [gpu["uuid"] for gpu in body["gpus"]] for s, body in services.items()} == {
        "learner": [M40],
        "carla": [GTX1650],
        "evaluator": [RTX3090],
        "redis": [],
    }

    started = run_drgpu("up", *args, env=bed.env())

    assert started.returncode == 0, started.stderr
    started_containers = {s: container_of(bed, name, s) for s in (*PLANNED, "redis")}
    for service_name, uuid in PLANNED.items():
        container = started_containers[service_name]
        (request,) = container["HostConfig"]["DeviceRequests"]
        assert (request["Driver"], request["DeviceIDs"], request["Count"]) == ("nvidia", [uuid], 0)
        assert env_of(container)["CUDA_VISIBLE_DEVICES"] == uuid
        assert env_of(container)["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert container["Config"]["Labels"]["drgpu.gpus"] == uuid
        assert nvml_inside(bed, container) == [[0, uuid]]
    (carla_request,) = started_containers["carla"]["HostConfig"]["DeviceRequests"]
    assert "graphics" in carla_request["Capabilities"][0]
    redis = started_containers["redis"]
    assert not redis["HostConfig"].get("DeviceRequests")
    assert env_of(redis)["NVIDIA_VISIBLE_DEVICES"] == "void"
    records = {r["container_id"]: r["devices"] for r in bed.records() if r["devices"]}
    assert records == {started_containers[s]["Id"]: [uuid] for s, uuid in PLANNED.items()}

    checked = run_drgpu("cuda-check", "--all", "--json", "--env-file", str(env_file), env=bed.env())
    assert checked.returncode == 0, checked.stderr
    results = {r["service"]: r for r in json.loads(checked.stdout)["results"]}
    assert {s: r["seen_nvml"] for s, r in results.items()} == {
        s: [uuid] for s, uuid in PLANNED.items()
    }

    evaluator_pid = started_containers["evaluator"]["State"]["Pid"]
    bed.set_topology(mixed_box({RTX3090: [evaluator_pid]}))
    status = run_drgpu("status", "--run-id", project, "--json", env=bed.env())
    assert status.returncode == 0, status.stderr
    (process,) = json.loads(status.stdout)["processes"]
    assert (process["service"], process["verdict"]) == ("evaluator", "ok")
    bed.set_topology(mixed_box({M40: [evaluator_pid]}))
    status = run_drgpu("status", "--run-id", project, "--json", env=bed.env())
    assert status.returncode == 6, status.stderr
    (violation,) = json.loads(status.stdout)["findings"]
    assert violation["kind"] == "wrong-gpu"
    assert "evaluator" in violation["message"]

    stopped = run_drgpu("down", *args, env=bed.env())
    assert stopped.returncode == 0, stopped.stderr
    assert containers(bed, name) == []


def test_dr_workers_copies_the_declared_simulator_each_with_its_gpu(
    bed: Any, example: tuple[Path, Path], new_run: NewRun
) -> None:
    project = new_run()
    stack, env_file = example
    env_file.write_text(
        f"DR_RUN_ID={project}\nDR_WORKERS=2\nDRGPU_TRAINER_DEVICES=2\nDRGPU_SIMULATOR_DEVICES=0,1\n"
    )
    bed.set_topology(mixed_box())
    name = f"deepracer-{project}"
    args = ("--env-file", str(env_file), "-f", str(stack))

    started = run_drgpu("up", *args, env=bed.env())

    assert started.returncode == 0, started.stderr
    services = {
        c["Config"]["Labels"]["com.docker.compose.service"]: c for c in containers(bed, name)
    }
    assert set(services) == {"learner", "carla-1", "carla-2", "evaluator", "redis"}
    for worker, uuid in (("carla-1", GTX1650), ("carla-2", RTX3090)):
        assert nvml_inside(bed, services[worker]) == [[0, uuid]]
        assert env_of(services[worker])["DOCKER_REPLICA_SLOT"] == worker[-1]
        assert services[worker]["Config"]["Labels"]["drgpu.role"] == "simulator"
    assert not services["evaluator"]["HostConfig"].get("DeviceRequests")


def test_down_without_the_stacks_files_says_compose_s_reason(
    bed: Any, example: tuple[Path, Path], new_run: NewRun
) -> None:
    project = new_run()
    # `down` without -f lays the example's override on drgpu's base stack: Compose refuses,
    # and the user must hear why, not only that it failed.
    stack, env_file = example
    bed.set_topology(mixed_box())
    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())
    assert started.returncode == 0, started.stderr

    refused = run_drgpu("down", "--env-file", str(env_file), env=bed.env())

    assert refused.returncode == 5, refused.stderr
    first, hint = refused.stderr.splitlines()
    assert first.startswith(f"drgpu: error: compose down failed for deepracer-{project}: ")
    assert "has neither an image nor a build context" in first
    assert (
        hint == "  hint: pass the compose files (-f) and settings that `drgpu up` started it with"
    )
    stopped = run_drgpu("down", "--env-file", str(env_file), "-f", str(stack), env=bed.env())
    assert stopped.returncode == 0, stopped.stderr
    assert containers(bed, f"deepracer-{project}") == []
