"""An activated DeepRacer-for-cloud-shaped checkout in DRfC's default Docker style, swarm:
`drgpu up` runs DRfC's own swarm start script (its jq label check, `docker stack deploy -c
... --detach=true`, `replicas: ${DR_WORKERS}`) with drgpu's swarm override appended to
the `-c` list, verifies every task against the stub NVIDIA runtime's record, and `drgpu
down` runs DRfC's stop script and waits until nothing of the stack is left."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.drfc import Checkout, copy_checkout
from tests.e2e.helpers import SIMULATOR, SPARE, TRAINER
from tests.support.runners import start_drgpu
from tests.swarm.test_swarm_up import containers, exposed, leftovers

pytestmark = pytest.mark.docker

GPU0, GPU1, GPU2 = SIMULATOR, TRAINER, SPARE  # nvidia-smi (PCI) order of THREE_GPUS
TRAIN = "/opt/ml/code/run.sh run distributed_training.launch.py"
MULTI = "/opt/ml/code/run.sh multi distributed_training.launch.py"
EVALUATE = "/opt/ml/code/run.sh run evaluation.launch.py"
RUNS = ("0", "1", "2", "3", "4")


def _remove_everything(bed: Any) -> None:
    for run_id in RUNS:
        for project in (f"deepracer-{run_id}", f"deepracer-eval-{run_id}"):
            bed.docker("stack", "rm", project, check=False)
    trainers = bed.docker("ps", "-aq", "--filter", "name=algo-", check=False).stdout.split()
    if trainers:
        bed.docker("rm", "-f", "-v", *trainers, check=False)


@pytest.fixture
def swarm_checkout(swarm_bed: Any, tmp_path: Path) -> Iterator[Checkout]:
    """A copy of the checkout in swarm style (its system.env says nothing of the style:
    activation's default, swarm), the trainer on GPU 2 and the simulator on GPU 0."""
    checkout = copy_checkout(swarm_bed, tmp_path)
    system = checkout.root / "system.env"
    system.write_text(system.read_text().replace("DR_DOCKER_STYLE=compose\n", ""))
    yield checkout
    _remove_everything(swarm_bed)


def inspected(bed: Any, container_id: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(bed.docker("inspect", container_id).stdout)[0]
    return found


def command_of(bed: Any, container_id: str) -> str:
    return str(inspected(bed, container_id)["Config"]["Cmd"][-1])


def sagemaker_trainer(bed: Any) -> dict[str, str]:
    """The environment of the SageMaker trainer rl_coach started, once it runs."""
    deadline = time.monotonic() + 30
    while True:
        ids = bed.docker("ps", "-q", "--filter", "name=algo-").stdout.split()
        if ids:
            (found,) = ids
            env = inspected(bed, found)["Config"]["Env"]
            return dict(item.split("=", 1) for item in env if "=" in item)
        assert time.monotonic() < deadline, "rl_coach started no SageMaker trainer"
        time.sleep(0.2)


def wait_for_tasks(bed: Any, project: str, count: int) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + 60
    while len(seen := containers(bed, project)) < count:
        assert time.monotonic() < deadline, f"{project}: {sorted(seen)}"
        time.sleep(0.2)
    return seen


def wait_gone(bed: Any, project: str) -> None:
    deadline = time.monotonic() + 60
    while leftovers(bed, project):
        assert time.monotonic() < deadline, f"{project} is not gone"
        time.sleep(0.2)


def test_three_up_down_cycles_run_drfcs_swarm_start_with_exact_gpus(
    swarm_bed: Any, swarm_checkout: Checkout
) -> None:
    checkout = swarm_checkout
    shell = checkout.activated()
    assert shell["DR_DOCKER_STYLE"] == "swarm"
    assert shell["DR_TRAIN_COMPOSE_FILE"].startswith("-c ")
    project = "deepracer-0"
    override = checkout.root / ".drgpu" / f"{project}.swarm-override.yml"
    for cycle in range(3):
        if cycle == 2:  # system.env names the engine, the shell another: system.env's counts
            checkout.set("system.env", DOCKER_HOST=swarm_bed.docker_host)
            shell = {**shell, "DOCKER_HOST": "unix:///nowhere/docker.sock"}
        # DRfC's start refuses a model prefix that exists (the first cycle made it): -w.
        started = checkout.drgpu(shell, "up", "--", "-w")

        assert started.returncode == 0, f"cycle {cycle}: {started.stderr}"
        seen = containers(swarm_bed, project)
        assert sorted(seen) == [f"{project}_rl_coach.1", f"{project}_robomaker.1"]
        robomaker = seen[f"{project}_robomaker.1"]
        rl_coach = seen[f"{project}_rl_coach.1"]
        assert exposed(swarm_bed, robomaker["id"]) == [GPU0], f"cycle {cycle}"
        assert exposed(swarm_bed, rl_coach["id"]) == [], f"cycle {cycle}"
        # rl_coach forwards the trainer GPU's UUID to the SageMaker trainer it starts.
        assert sagemaker_trainer(swarm_bed)["CUDA_VISIBLE_DEVICES"] == GPU2, f"cycle {cycle}"
        if cycle == 0:
            assert "start.sh: Training of model s3://bucket/rl-deepracer-sagemaker" in (
                started.stderr
            )
            assert "exactly its planned GPUs" in started.stderr
            assert robomaker["env"]["NVIDIA_VISIBLE_DEVICES"] == GPU0
            assert robomaker["env"]["CUDA_VISIBLE_DEVICES"] == GPU0
            assert robomaker["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
            assert robomaker["env"]["DOCKER_REPLICA_SLOT"] == "1"  # DRfC's swarm file
            # The command DRfC's start script exported (ROBOMAKER_COMMAND).
            assert command_of(swarm_bed, robomaker["id"]) == TRAIN
            assert rl_coach["env"]["CUDA_VISIBLE_DEVICES"] == GPU2
            assert rl_coach["env"]["NVIDIA_VISIBLE_DEVICES"] == "void"
            # run.env's `$VAR` values arrive expanded, as DRfC's activation expands them.
            assert rl_coach["env"]["MODELMETADATA_FILE_S3_KEY"] == (
                "custom_files/model_metadata.json"
            )
            assert override.read_text().startswith(f"# Written by drgpu for swarm stack {project}")
            assert not (checkout.root / ".drgpu" / f"{project}.swarm.yml").exists()

        if cycle == 1:  # a trainer of the run DRfC's lookup misses (only created): down too
            swarm_bed.docker(
                "create", "--name", "tmpmiss0-algo-1-abcde-1", "--network", "none",
                "-e", "RUN_ID=0", swarm_bed.image, "sleep", "infinity",
            )  # fmt: skip
        stopped = checkout.drgpu(shell, "down")

        assert stopped.returncode == 0, f"cycle {cycle}: {stopped.stderr}"
        assert leftovers(swarm_bed, project) == []  # tasks, containers and network
        # DRfC's stop script (and drgpu, after it) stopped the SageMaker trainers.
        trainers = swarm_bed.docker("ps", "-aq", "--filter", "name=algo-").stdout.split()
        assert trainers == [], f"cycle {cycle}"
        assert not override.exists()


def test_two_workers_each_get_their_gpu_and_drfcs_own_commands_use_the_override(
    swarm_bed: Any, swarm_checkout: Checkout
) -> None:
    checkout = swarm_checkout
    checkout.set("system.env", DR_WORKERS="2", DR_ROBOMAKER_CUDA_DEVICES="0,1")
    checkout.set("run.env", DR_RUN_ID="1")
    shell = checkout.activated()
    project = "deepracer-1"

    started = checkout.drgpu(shell, "up")

    assert started.returncode == 0, started.stderr
    seen = containers(swarm_bed, project)
    workers = {slot: seen[f"{project}_robomaker.{slot}"] for slot in (1, 2)}
    assert exposed(swarm_bed, workers[1]["id"]) == [GPU0]
    assert exposed(swarm_bed, workers[2]["id"]) == [GPU1]  # never the trainer's GPU 2
    for worker in workers.values():
        assert command_of(swarm_bed, worker["id"]) == MULTI
    assert seen[f"{project}_rl_coach.1"]["env"]["CUDA_VISIBLE_DEVICES"] == GPU2
    stopped = checkout.drgpu(shell, "down")
    assert stopped.returncode == 0, stopped.stderr
    assert leftovers(swarm_bed, project) == []

    # DRfC's own commands after `eval "$(drgpu drfc-env)"`: the docker CLI merges the
    # override into DRfC's files (constraints appended, environment per key).
    exports = checkout.drgpu(shell, "drfc-env")
    assert exports.returncode == 0, exports.stderr
    assert "swarm-override.yml" in exports.stdout
    merged = checkout.bash(shell, f"{exports.stdout}\ndocker stack config $DR_TRAIN_COMPOSE_FILE")
    assert merged.returncode == 0, merged.stderr
    robomaker = yaml.safe_load(merged.stdout)["services"]["robomaker"]
    assert robomaker["deploy"]["replicas"] == 2
    constraints = robomaker["deploy"]["placement"]["constraints"]
    assert constraints[0] == "node.labels.Robomaker == true"
    assert constraints[1].startswith("node.id == ")
    assert robomaker["environment"]["NVIDIA_VISIBLE_DEVICES"] == (
        f'{{{{if eq .Task.Slot "1"}}}}{GPU0}{{{{else if eq .Task.Slot "2"}}}}{GPU1}'
        "{{else}}void{{end}}"
    )
    assert robomaker["environment"]["DOCKER_REPLICA_SLOT"] == "{{.Task.Slot}}"

    by_drfc = checkout.bash(shell, f"{exports.stdout}\ndr-start-training -q -w")
    assert by_drfc.returncode == 0, by_drfc.stderr
    seen = wait_for_tasks(swarm_bed, project, 3)
    assert exposed(swarm_bed, seen[f"{project}_robomaker.1"]["id"]) == [GPU0]
    assert exposed(swarm_bed, seen[f"{project}_robomaker.2"]["id"]) == [GPU1]
    assert exposed(swarm_bed, seen[f"{project}_rl_coach.1"]["id"]) == []
    stopped_by_drfc = checkout.bash(shell, f"{exports.stdout}\ndr-stop-training")
    assert stopped_by_drfc.returncode == 0, stopped_by_drfc.stderr
    wait_gone(swarm_bed, project)


def test_evaluation_alone_and_beside_a_training(swarm_bed: Any, swarm_checkout: Checkout) -> None:
    checkout = swarm_checkout
    checkout.set("run.env", DR_RUN_ID="2", DR_WORKERS="2")  # DRfC evaluates with one
    training, evaluation = "deepracer-2", "deepracer-eval-2"

    alone = checkout.drgpu(checkout.activated(), "up", "--eval")

    # DRfC's evaluation rl_coach echoes and exits 0: no GPU service, so it may end.
    assert alone.returncode == 0, alone.stderr
    evaluator = containers(swarm_bed, evaluation)[f"{evaluation}_robomaker.1"]
    assert exposed(swarm_bed, evaluator["id"]) == [GPU0]
    assert command_of(swarm_bed, evaluator["id"]) == EVALUATE
    stopped = checkout.drgpu(checkout.activated(), "down", "--eval")
    assert stopped.returncode == 0, stopped.stderr
    assert leftovers(swarm_bed, evaluation) == []

    checkout.set("run.env", DR_WORKERS="1")
    shell = checkout.activated()
    started = checkout.drgpu(shell, "up", "--", "-w")  # the evaluation made the model prefix
    assert started.returncode == 0, started.stderr
    before = containers(swarm_bed, training)
    checkout.set("system.env", DR_ROBOMAKER_CUDA_DEVICES="1")  # the training holds GPU 0

    beside = checkout.drgpu(shell, "up", "--eval")

    assert beside.returncode == 0, beside.stderr
    evaluator = containers(swarm_bed, evaluation)[f"{evaluation}_robomaker.1"]
    assert exposed(swarm_bed, evaluator["id"]) == [GPU1]
    assert containers(swarm_bed, training) == before  # untouched
    assert checkout.drgpu(shell, "down", "--eval").returncode == 0
    assert leftovers(swarm_bed, evaluation) == []
    assert containers(swarm_bed, training) == before
    assert checkout.drgpu(shell, "down").returncode == 0
    assert leftovers(swarm_bed, training) == []


def test_a_signal_mid_start_runs_drfcs_stop_and_leaves_nothing(
    swarm_bed: Any, swarm_checkout: Checkout
) -> None:
    checkout = swarm_checkout
    checkout.set("run.env", DR_RUN_ID="3")
    project = "deepracer-3"
    # The start script deploys, then takes its time: the signal comes while it runs.
    script = checkout.root / "scripts" / "training" / "start.sh"
    text = script.read_text()
    script.write_text(
        text.replace('\nif [ -n "$OPT_QUIET" ]', '\nsleep 60\nif [ -n "$OPT_QUIET" ]')
    )
    shell = checkout.activated()
    running = start_drgpu("up", env=shell, cwd="/")
    wait_for_tasks(swarm_bed, project, 1)

    running.send_signal(signal.SIGTERM)
    _, stderr = running.communicate(timeout=180)

    assert running.returncode == 143, stderr
    assert stderr.splitlines()[-1] == "drgpu: error: interrupted (SIGTERM)"
    assert "Traceback" not in stderr
    assert leftovers(swarm_bed, project) == []
    assert not (checkout.root / ".drgpu").exists()  # its swarm override went too


def test_a_missing_node_label_is_said_by_doctor_and_refused_by_up(
    swarm_bed: Any, swarm_checkout: Checkout
) -> None:
    checkout = swarm_checkout
    checkout.set("run.env", DR_RUN_ID="4")
    shell = checkout.activated()
    node = swarm_bed.docker("info", "--format", "{{.Swarm.NodeID}}").stdout.strip()
    swarm_bed.docker("node", "update", "--label-rm", "Robomaker", node)
    try:
        doctor = checkout.drgpu(shell, "doctor", "--json")
        started = checkout.drgpu(shell, "up")
    finally:
        swarm_bed.docker("node", "update", "--label-add", "Robomaker=true", node)

    found = json.loads(doctor.stdout)["findings"]
    checks = {c["kind"]: c for c in found if c["kind"] == "drfc-swarm"}
    assert checks["drfc-swarm"]["level"] == "fail", doctor.stdout
    assert checks["drfc-swarm"]["fix"] == f"docker node update --label-add Robomaker=true {node}"
    assert started.returncode == 5, started.stderr
    assert "no swarm node is labelled Robomaker=true" in started.stderr
    assert f"docker node update --label-add Robomaker=true {node}" in started.stderr
    assert leftovers(swarm_bed, "deepracer-4") == []
