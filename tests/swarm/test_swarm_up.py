"""`drgpu up` and `drgpu down` on Docker Swarm: real engine, real `docker stack`, fake GPUs,
and the stub NVIDIA runtime's hook recording what each task's container was given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import NewRun
from tests.e2e.helpers import SIMULATOR, SPARE, THREE_GPUS, TRAINER
from tests.support.runners import run_drgpu
from tests.swarm.conftest import GPU_UUIDS

pytestmark = pytest.mark.docker
VARIABLE = "DOCKER_RESOURCE_NVIDIA-GPU"
# NVML (PCI) order of THREE_GPUS: index 0 is the GTX 1650, 1 the M40, 2 the L4.
BY_INDEX = (SIMULATOR, TRAINER, SPARE)


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


def settings(
    tmp_path: Path,
    run_id: str,
    workers: int,
    style: str = "swarm",
    trainer: str = "2",
    simulator: str = "0",
    extra: str = "",
) -> Path:
    path = tmp_path / "system.env"
    path.write_text(
        f"DR_RUN_ID={run_id}\nDR_DOCKER_STYLE={style}\nDR_WORKERS={workers}\n"
        f"DR_SAGEMAKER_CUDA_DEVICES={trainer}\nDR_ROBOMAKER_CUDA_DEVICES={simulator}\n{extra}"
    )
    return path


def containers(bed: Any, project: str) -> dict[str, dict[str, Any]]:
    """Each running container of a stack (id and environment), by task (service.slot)."""
    label = f"label=com.docker.stack.namespace={project}"
    ids = bed.docker("ps", "-q", "--filter", label).stdout.split()
    found = {}
    for item in json.loads(bed.docker("inspect", *ids).stdout) if ids else []:
        name = item["Config"]["Labels"]["com.docker.swarm.task.name"].rsplit(".", 1)[0]
        env = dict(entry.split("=", 1) for entry in item["Config"]["Env"] if "=" in entry)
        found[name] = {"id": item["Id"], "env": env}
    return found


def exposed(bed: Any, container_id: str) -> list[str]:
    """The GPUs the stub runtime's hook exposed to a container (its record)."""
    record = json.loads((bed.records_dir / f"{container_id}.json").read_text())
    assert record["error"] is None, record
    return list(record["devices"])


def leftovers(bed: Any, project: str) -> list[str]:
    label = f"label=com.docker.stack.namespace={project}"
    return [
        *bed.docker("service", "ls", "-q", "--filter", label).stdout.split(),
        *bed.docker("ps", "-aq", "--filter", label).stdout.split(),
        *bed.docker("network", "ls", "-q", "--filter", label).stdout.split(),
    ]


def test_each_task_is_pinned_to_its_gpus_and_down_removes_the_stack(
    swarm_bed: Any, tmp_path: Path, stack: Path, new_run: NewRun
) -> None:
    run_id = new_run()
    # Two workers on 0,1: one each, by replica slot; the trainer on 2. The node
    # advertises all three GPUs, which no task reserves.
    env_file = settings(tmp_path, run_id, workers=2, simulator="0,1")
    project = f"deepracer-{run_id}"

    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=swarm_bed.env())

    assert started.returncode == 0, started.stderr
    seen = containers(swarm_bed, project)
    assert sorted(seen) == [
        f"{project}_{name}" for name in ("redis.1", "robomaker.1", "robomaker.2", "sagemaker.1")
    ]
    wanted = {"robomaker.1": [BY_INDEX[0]], "robomaker.2": [BY_INDEX[1]], "sagemaker.1": [SPARE]}
    for task, uuids in wanted.items():
        container = seen[f"{project}_{task}"]
        assert container["env"]["NVIDIA_VISIBLE_DEVICES"] == ",".join(uuids), task
        assert container["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(uuids), task
        assert container["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID", task
        assert VARIABLE not in container["env"], task
        assert exposed(swarm_bed, container["id"]) == uuids, task
    assert exposed(swarm_bed, seen[f"{project}_redis.1"]["id"]) == []
    stack_file = tmp_path / ".drgpu" / f"{project}.swarm.yml"
    assert stack_file.read_text().startswith("# Written by drgpu for swarm stack")
    assert stack_file.stat().st_mode & 0o077 == 0
    assert "exactly its planned GPUs" in started.stderr

    stopped = run_drgpu("down", "--env-file", str(env_file), "-f", str(stack), env=swarm_bed.env())

    assert stopped.returncode == 0, stopped.stderr
    assert leftovers(swarm_bed, project) == []
    assert not stack_file.exists()  # it held the settings' secrets


def test_four_cycles_never_expose_the_simulator_to_the_trainers_gpu(
    swarm_bed: Any, tmp_path: Path, stack: Path, new_run: NewRun
) -> None:
    run_id = new_run()
    # The bed: the node advertises all three GPUs; trainer index 2, simulator 0.
    env_file = settings(tmp_path, run_id, workers=1)
    project = f"deepracer-{run_id}"
    for cycle in range(4):
        started = run_drgpu(
            "up", "--env-file", str(env_file), "-f", str(stack), env=swarm_bed.env()
        )
        assert started.returncode == 0, f"cycle {cycle}: {started.stderr}"
        seen = containers(swarm_bed, project)
        simulator = exposed(swarm_bed, seen[f"{project}_robomaker.1"]["id"])
        trainer = exposed(swarm_bed, seen[f"{project}_sagemaker.1"]["id"])
        assert simulator == [BY_INDEX[0]], f"cycle {cycle}"
        assert trainer == [BY_INDEX[2]], f"cycle {cycle}"
        if cycle == 0:
            check_observed(swarm_bed, run_id, project)
        stopped = run_drgpu(
            "down", "--env-file", str(env_file), "-f", str(stack), env=swarm_bed.env()
        )
        assert stopped.returncode == 0, stopped.stderr
        assert leftovers(swarm_bed, project) == []


def check_observed(bed: Any, run_id: str, project: str) -> None:
    """`status --json`, `gpus --json` and `cuda-check --all` see the swarm stack's tasks."""
    status = run_drgpu("status", "--json", "--run-id", run_id, env=bed.env())
    assert status.returncode == 0, status.stderr
    (run,) = json.loads(status.stdout)["runs"]
    assert run["project"] == project
    services = {name: [c["gpus"] for c in found] for name, found in run["services"].items()}
    assert services == {"redis": [[]], "robomaker": [[BY_INDEX[0]]], "sagemaker": [[BY_INDEX[2]]]}
    gpus = run_drgpu("gpus", "--json", env=bed.env())
    holders = {
        gpu["uuid"]: [(h["run_id"], h["service"]) for h in gpu["held_by"]]
        for gpu in json.loads(gpus.stdout)["gpus"]
    }
    assert holders[BY_INDEX[0]] == [(run_id, "robomaker")]
    assert holders[BY_INDEX[2]] == [(run_id, "sagemaker")]
    checked = run_drgpu("cuda-check", "--all", "--json", "--run-id", run_id, env=bed.env())
    assert checked.returncode == 0, checked.stderr + checked.stdout
    document = json.loads(checked.stdout)
    seen = {result["service"]: result["seen_nvml"] for result in document["results"]}
    assert seen == {"robomaker": [BY_INDEX[0]], "sagemaker": [BY_INDEX[2]]}


def test_generic_resources_are_refused_while_the_node_advertises_the_trainers_gpu(
    swarm_bed: Any, tmp_path: Path, stack: Path, new_run: NewRun
) -> None:
    run_id = new_run()
    env_file = settings(tmp_path, run_id, workers=1, extra="DRGPU_SWARM_GPUS=generic\n")
    project = f"deepracer-{run_id}"

    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=swarm_bed.env())

    assert started.returncode == 3, started.stderr
    assert f"GPU {SPARE}, pinned for sagemaker, is advertised to Swarm" in started.stderr
    assert "swarm-setup" in started.stderr
    assert "Traceback" not in started.stderr
    assert leftovers(swarm_bed, project) == []


def test_a_deploy_on_an_engine_in_no_swarm_reports_the_deploy_error(
    bed: Any, tmp_path: Path
) -> None:
    bed.set_topology(THREE_GPUS)
    path = tmp_path / "stack.yml"
    path.write_text(yaml.safe_dump({"services": {"sagemaker": service(bed)}}))
    env_file = settings(tmp_path, "noswarm", workers=1)

    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(path), env=bed.env())

    assert started.returncode == 5, started.stderr
    assert "docker stack deploy failed" in started.stderr
    assert "swarm manager" in started.stderr
    assert "error: docker stack rm" not in started.stderr


def test_the_rendered_stack_file_is_valid_for_the_docker_cli(
    swarm_bed: Any, tmp_path: Path, stack: Path
) -> None:
    env_file = settings(tmp_path, "render", workers=2, simulator="0,1")
    rendered = run_drgpu(
        "render",
        "--env-file",
        str(env_file),
        "-f",
        str(stack),
        "-o",
        str(tmp_path / "s.yml"),
        env=swarm_bed.env(),
    )
    assert rendered.returncode == 0, rendered.stderr

    checked = swarm_bed.docker("stack", "config", "-c", str(tmp_path / "s.yml"))

    robomaker = yaml.safe_load(checked.stdout)["services"]["robomaker"]
    visible = robomaker["environment"]["NVIDIA_VISIBLE_DEVICES"]
    assert visible == (
        f'{{{{if eq .Task.Slot "1"}}}}{BY_INDEX[0]}'
        f'{{{{else if eq .Task.Slot "2"}}}}{BY_INDEX[1]}{{{{else}}}}void{{{{end}}}}'
    )
    assert "generic_resources" not in json.dumps(robomaker)


def test_swarm_setup_sees_the_engines_gpu_resources(swarm_bed: Any, tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps(THREE_GPUS))
    done = run_drgpu(
        "swarm-setup",
        "--json",
        "--inventory",
        str(inventory),
        "--daemon-json",
        str(tmp_path / "absent.json"),
        "--toolkit-config",
        str(tmp_path / "absent.toml"),
        env=swarm_bed.env(),
    )

    assert done.returncode == 6, done.stderr
    findings = {f["subject"]: f for f in json.loads(done.stdout)["findings"]}
    assert findings["engine: generic resources"]["level"] == "ok"
    assert findings["engine: default runtime"]["level"] == "ok"
    assert findings["engine: node labels"]["message"] == "Sagemaker=true, Robomaker=true"
    assert sorted(GPU_UUIDS) == sorted(BY_INDEX)


def test_swarm_setup_keeps_the_trainers_gpu_off_the_advertised_list(
    swarm_bed: Any, tmp_path: Path
) -> None:
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps(THREE_GPUS))
    env_file = settings(tmp_path, "setup", workers=1)  # trainer 2 (the L4), simulator 0
    done = run_drgpu(
        "swarm-setup",
        "--json",
        "--env-file",
        str(env_file),
        "--inventory",
        str(inventory),
        "--daemon-json",
        str(tmp_path / "absent.json"),
        "--toolkit-config",
        str(tmp_path / "absent.toml"),
        env=swarm_bed.env(),
    )

    assert done.returncode == 6, done.stderr
    document = json.loads(done.stdout)
    assert document["node_generic_resources"] == [
        f"NVIDIA-GPU={uuid}" for uuid in (SIMULATOR, TRAINER)
    ]
    assert document["daemon_json"]["wanted"]["node-generic-resources"] == [
        f"NVIDIA-GPU={uuid}" for uuid in (SIMULATOR, TRAINER)
    ]
    engine = [f for f in document["findings"] if f["subject"] == "engine: generic resources"]
    assert [f["level"] for f in engine] == ["fail"]
    assert engine[0]["message"].startswith(f"NVIDIA-GPU={SPARE}: the trainer's GPU")


def record_of(bed: Any, container_id: str) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((bed.records_dir / f"{container_id}.json").read_text())
    return record


def test_generic_simulators_get_only_advertised_gpus_never_the_trainers(
    simulator_swarm_bed: Any, tmp_path: Path
) -> None:
    # Several simulator nodes would need generic resources; DRGPU_SWARM_GPUS=generic asks
    # for them here. The node advertises only GPUs 0 and 1, as swarm-setup has it do when
    # the trainer has GPU 2.
    bed = simulator_swarm_bed
    path = tmp_path / "stack.yml"
    services = {name: service(bed) for name in ("sagemaker", "robomaker")}
    path.write_text(yaml.safe_dump({"services": services}))
    env_file = settings(
        tmp_path, "generic", workers=2, simulator="0,1", extra="DRGPU_SWARM_GPUS=generic\n"
    )
    project = "deepracer-generic"
    try:
        started = run_drgpu("up", "--env-file", str(env_file), "-f", str(path), env=bed.env())

        assert started.returncode == 0, started.stderr
        assert "engine's choice" in started.stdout
        seen = containers(bed, project)
        chosen = []
        for task in ("robomaker.1", "robomaker.2"):
            container = seen[f"{project}_{task}"]
            assert container["env"]["NVIDIA_VISIBLE_DEVICES"] == "void"
            record = record_of(bed, container["id"])
            assert record["source"] == VARIABLE
            assert record["devices"] == [container["env"][VARIABLE]]
            chosen.extend(record["devices"])
        assert sorted(chosen) == sorted(BY_INDEX[:2])
        trainer = record_of(bed, seen[f"{project}_sagemaker.1"]["id"])
        assert (trainer["source"], trainer["devices"]) == ("NVIDIA_VISIBLE_DEVICES", [SPARE])
        # The GPUs the engine chose are held: another run planning here is refused them.
        other = tmp_path / "other"
        other.mkdir()
        asks = settings(
            other, "x", 1, "compose", trainer="", simulator=str(BY_INDEX.index(chosen[0]))
        )
        taken = run_drgpu("plan", "--env-file", str(asks), env=bed.env())
        assert taken.returncode == 3, taken.stderr
        assert "generic" in taken.stderr

        stopped = run_drgpu("down", "--env-file", str(env_file), "-f", str(path), env=bed.env())
        assert stopped.returncode == 0, stopped.stderr
        assert leftovers(bed, project) == []
    finally:
        bed.docker("stack", "rm", project, check=False)


def test_a_service_with_gpus_of_its_own_is_pinned_and_claims_them(
    swarm_bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    run_id = new_run()
    # issue 15 on Swarm: DRGPU_DEVICES_EVALUATOR pins the evaluator as the trainer is pinned.
    path = tmp_path / "stack.yml"
    services = {name: service(swarm_bed) for name in ("learner", "evaluator", "redis")}
    services["learner"]["labels"] = {"drgpu.role": "trainer"}
    path.write_text(yaml.safe_dump({"services": services}))
    env_file = settings(tmp_path, run_id, workers=1, trainer="2", simulator="")
    with env_file.open("a") as stream:
        stream.write("DRGPU_DEVICES_EVALUATOR=1\n")
    project = f"deepracer-{run_id}"

    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(path), env=swarm_bed.env())

    assert started.returncode == 0, started.stderr
    seen = containers(swarm_bed, project)
    evaluator = seen[f"{project}_evaluator.1"]
    assert evaluator["env"]["NVIDIA_VISIBLE_DEVICES"] == BY_INDEX[1]
    assert exposed(swarm_bed, evaluator["id"]) == [BY_INDEX[1]]
    assert exposed(swarm_bed, seen[f"{project}_learner.1"]["id"]) == [BY_INDEX[2]]
    assert exposed(swarm_bed, seen[f"{project}_redis.1"]["id"]) == []
    # Another run planning on this host sees the evaluator's GPU as held.
    other = tmp_path / "other"
    other.mkdir()
    taken = run_drgpu(
        "plan", "--env-file", str(settings(other, "x", 1, "compose", "1", "")), env=swarm_bed.env()
    )
    assert taken.returncode == 3, taken.stderr
    assert run_id in taken.stderr
