"""`drgpu up` and `drgpu down` on Docker Swarm: real engine, real `docker stack`, fake GPUs."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.helpers import THREE_GPUS, drgpu
from tests.swarm.conftest import GPU_UUIDS

pytestmark = pytest.mark.docker
VARIABLE = "DOCKER_RESOURCE_NVIDIA-GPU"


def service(bed: Any) -> dict[str, Any]:
    """A service that sleeps, stops at once, and needs no network."""
    return {
        "image": bed.image,
        "init": True,
        "stop_grace_period": "1s",
        "command": ["sleep", "infinity"],
    }


@pytest.fixture
def stack(swarm_bed: Any, tmp_path: Path) -> Path:
    """A compose file of a trainer, a simulator and a cache."""
    path = tmp_path / "stack.yml"
    services = {name: service(swarm_bed) for name in ("sagemaker", "robomaker", "redis")}
    services["sagemaker"]["environment"] = {"CUDA_VISIBLE_DEVICES": "1"}
    path.write_text(yaml.safe_dump({"services": services}))
    return path


@pytest.fixture
def run_id(swarm_bed: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A run id unique to the test; its stack is removed afterwards."""
    run_id = re.sub(r"[^a-z0-9]", "", request.node.name.lower())[-20:]
    yield run_id
    swarm_bed.docker("stack", "rm", f"deepracer-{run_id}", check=False)


def settings(tmp_path: Path, run_id: str, workers: int, style: str = "swarm") -> Path:
    path = tmp_path / "system.env"
    path.write_text(
        f"DR_RUN_ID={run_id}\nDR_DOCKER_STYLE={style}\nDR_WORKERS={workers}\n"
        "DR_SAGEMAKER_CUDA_DEVICES=1\nDR_ROBOMAKER_CUDA_DEVICES=0\n"
    )
    return path


def containers(bed: Any, project: str) -> dict[str, dict[str, str]]:
    """Environment of each container of a stack, by task name (service.slot)."""
    label = f"label=com.docker.stack.namespace={project}"
    ids = bed.docker("ps", "-aq", "--filter", label).stdout.split()
    found = {}
    for item in json.loads(bed.docker("inspect", *ids).stdout) if ids else []:
        name = item["Config"]["Labels"]["com.docker.swarm.task.name"].rsplit(".", 1)[0]
        found[name] = dict(entry.split("=", 1) for entry in item["Config"]["Env"])
    return found


def leftovers(bed: Any, project: str) -> list[str]:
    label = f"label=com.docker.stack.namespace={project}"
    return [
        *bed.docker("service", "ls", "-q", "--filter", label).stdout.split(),
        *bed.docker("ps", "-aq", "--filter", label).stdout.split(),
        *bed.docker("network", "ls", "-q", "--filter", label).stdout.split(),
    ]


def test_each_task_gets_its_own_gpus_and_down_removes_the_stack(
    swarm_bed: Any, tmp_path: Path, stack: Path, run_id: str
) -> None:
    env_file = settings(tmp_path, run_id, workers=2)
    project = f"deepracer-{run_id}"

    started = drgpu(swarm_bed, "up", "--env-file", str(env_file), "-f", str(stack))

    assert started.returncode == 0, started.stderr
    seen = containers(swarm_bed, project)
    assert sorted(seen) == [
        f"{project}_{name}" for name in ("redis.1", "robomaker.1", "robomaker.2", "sagemaker.1")
    ]
    given = [seen[name][VARIABLE] for name in sorted(seen) if VARIABLE in seen[name]]
    assert len(given) == 3
    assert len(set(given)) == 3, f"a GPU is given twice: {given}"
    assert set(given) <= set(GPU_UUIDS)
    trainer = seen[f"{project}_sagemaker.1"]
    assert trainer["CUDA_VISIBLE_DEVICES"] == "0"
    assert trainer["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert VARIABLE not in seen[f"{project}_redis.1"]
    assert seen[f"{project}_redis.1"]["NVIDIA_VISIBLE_DEVICES"] == "void"
    stack_file = tmp_path / ".drgpu" / f"{project}.swarm.yml"
    assert stack_file.read_text().startswith("# Written by drgpu for swarm stack")
    assert "holds its planned number of GPUs" in started.stderr

    stopped = drgpu(swarm_bed, "down", "--env-file", str(env_file), "-f", str(stack))

    assert stopped.returncode == 0, stopped.stderr
    assert leftovers(swarm_bed, project) == []


def test_more_gpu_tasks_than_gpus_fail_and_leave_nothing(
    swarm_bed: Any, tmp_path: Path, stack: Path, run_id: str
) -> None:
    # A trainer and three workers want four GPUs; the swarm has three.
    env_file = settings(tmp_path, run_id, workers=3, style="compose")
    project = f"deepracer-{run_id}"

    started = drgpu(swarm_bed, "up", "--swarm", "--env-file", str(env_file), "-f", str(stack))

    assert started.returncode == 5, started.stderr
    assert "insufficient resources" in started.stderr
    assert "Traceback" not in started.stderr
    assert leftovers(swarm_bed, project) == []


def test_the_rendered_stack_file_is_valid_for_the_docker_cli(
    swarm_bed: Any, tmp_path: Path, stack: Path
) -> None:
    env_file = settings(tmp_path, "render", workers=2)
    rendered = drgpu(
        swarm_bed,
        "render",
        "--env-file",
        str(env_file),
        "-f",
        str(stack),
        "-o",
        str(tmp_path / "s.yml"),
    )
    assert rendered.returncode == 0, rendered.stderr

    checked = swarm_bed.docker("stack", "config", "-c", str(tmp_path / "s.yml"))

    generic = yaml.safe_load(checked.stdout)["services"]["robomaker"]["deploy"]["resources"]
    assert (
        generic["reservations"]["generic_resources"][0]["discrete_resource_spec"]["kind"]
        == "NVIDIA-GPU"
    )


def test_swarm_setup_sees_the_engines_gpu_resources(swarm_bed: Any, tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps(THREE_GPUS))
    done = drgpu(
        swarm_bed,
        "swarm-setup",
        "--json",
        "--inventory",
        str(inventory),
        "--daemon-json",
        str(tmp_path / "absent.json"),
        "--toolkit-config",
        str(tmp_path / "absent.toml"),
    )

    assert done.returncode == 6, done.stderr
    findings = {f["subject"]: f for f in json.loads(done.stdout)["findings"]}
    assert findings["engine: generic resources"]["status"] == "ok"
    assert findings["engine: default runtime"]["status"] == "differs"
    assert findings["engine: node labels"]["detail"] == "Sagemaker=true, Robomaker=true"
