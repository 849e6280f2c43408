"""`drgpu up` and `drgpu down` in an activated DeepRacer-for-cloud-shaped checkout: DRfC's own
start and stop scripts, drgpu's GPUs, and proof (issue 10's "Done when")."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.drfc import Checkout, copy_checkout, remove_runs
from tests.e2e.helpers import SIMULATOR, SPARE, THREE_GPUS, TRAINER, containers

pytestmark = pytest.mark.docker

RUNS = ("0", "1")
# THREE_GPUS by nvidia-smi index (PCI bus order): the fixture's system.env asks for
# DR_SAGEMAKER_CUDA_DEVICES=2 and DR_ROBOMAKER_CUDA_DEVICES=0.
GPU0, GPU1, GPU2 = SIMULATOR, TRAINER, SPARE


@pytest.fixture
def checkout(bed: Any, tmp_path: Path) -> Iterator[Checkout]:
    bed.set_topology(THREE_GPUS)
    remove_runs(bed, *RUNS)
    yield copy_checkout(bed, tmp_path)
    remove_runs(bed, *RUNS)


def services(bed: Any, project: str) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for container in containers(bed, project):
        name = container["Config"]["Labels"]["com.docker.compose.service"]
        found.setdefault(name, []).append(container)
    return found


def env_of(container: dict[str, Any]) -> dict[str, str]:
    """A container's environment (DRfC's compose files pass some names without a value)."""
    pairs = (item.partition("=") for item in container["Config"]["Env"] or [])
    return {key: value for key, sep, value in pairs if sep}


def device_ids(container: dict[str, Any]) -> list[str]:
    requests = container["HostConfig"].get("DeviceRequests") or []
    return [uuid for request in requests for uuid in request.get("DeviceIDs") or []]


def sagemaker_trainers(bed: Any) -> list[dict[str, Any]]:
    ids = bed.docker("ps", "-aq", "--filter", "name=algo-").stdout.split()
    return list(json.loads(bed.docker("inspect", *ids).stdout)) if ids else []


def wait_for_sagemaker_trainer(bed: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        running = [c for c in sagemaker_trainers(bed) if c["State"]["Running"]]
        if running:
            assert len(running) == 1
            return running[0]
        assert time.monotonic() < deadline, "rl_coach started no SageMaker trainer"
        time.sleep(0.2)


def test_up_runs_drfc_start_with_exact_gpus_and_down_leaves_nothing(
    bed: Any, checkout: Checkout
) -> None:
    shell = checkout.activated()
    bed.clear_records()

    started = checkout.drgpu(shell, "up")

    assert started.returncode == 0, started.stderr
    assert "start.sh: Training of model s3://bucket/rl-deepracer-sagemaker starting." in (
        started.stderr
    )
    progress = [line.rsplit(" (", 1)[0] for line in started.stderr.splitlines()]
    for service in ("rl_coach", "robomaker"):  # Compose's lines through DRfC's script
        assert f"drgpu: {service}: Started" in progress, started.stderr
        assert f"drgpu: {service}: verified" in progress, started.stderr
    stack = services(bed, "deepracer-0")
    assert sorted(stack) == ["rl_coach", "robomaker"]
    (coach,) = stack["rl_coach"]
    (simulator,) = stack["robomaker"]
    assert env_of(coach)["CUDA_VISIBLE_DEVICES"] == GPU2
    assert env_of(coach)["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert device_ids(coach) == []
    # run.env's `$VAR` values arrive expanded, as DRfC's activation expands them.
    assert env_of(coach)["MODELMETADATA_FILE_S3_KEY"] == "custom_files/model_metadata.json"
    assert env_of(coach)["HYPERPARAMETER_FILE_S3_KEY"] == "custom_files/hyperparameters.json"
    assert device_ids(simulator) == [GPU0]
    assert env_of(simulator)["CUDA_VISIBLE_DEVICES"] == GPU0
    assert simulator["Config"]["Cmd"][-1] == (
        "/opt/ml/code/run.sh run distributed_training.launch.py"
    )
    with_gpus = {r["container_id"]: r["devices"] for r in bed.records() if r["devices"]}
    assert with_gpus[simulator["Id"]] == [GPU0]
    assert coach["Id"] not in with_gpus
    # DRfC's setup happened: the robomaker configuration was "uploaded".
    params = checkout.root / "data/minio/bucket/rl-deepracer-sagemaker/training_params.yaml"
    assert "MODEL_METADATA_FILE_S3_KEY: 'custom_files/model_metadata.json'" in params.read_text()

    # The trainer rl_coach starts through the Docker socket (SageMaker local mode) is
    # seen by status and cuda-check, and told exactly the trainer GPU.
    trainer = wait_for_sagemaker_trainer(bed)
    assert env_of(trainer)["CUDA_VISIBLE_DEVICES"] == GPU2
    status = checkout.drgpu(shell, "status", "--json")
    assert status.returncode == 0, status.stderr
    [seen] = json.loads(status.stdout)["sagemaker_trainers"]
    assert (seen["run_id"], seen["forwarded_gpus"], seen["ok"]) == ("0", [GPU2], True)
    checked = checkout.drgpu(shell, "cuda-check", "--all", "--json")
    assert checked.returncode == 0, checked.stderr + checked.stdout
    results = {r["service"]: r for r in json.loads(checked.stdout)["results"]}
    assert results["SageMaker trainer"]["seen_cuda"] == [GPU2]
    assert results["robomaker"]["seen_cuda"] == [GPU0]

    # An up while the run is up is refused before DRfC's start script runs: its rl_coach
    # would start a second trainer, and -w would wipe the model the first one trains.
    for wipe in ((), ("--", "-w")):
        again = checkout.drgpu(shell, "up", *wipe)
        assert again.returncode == 5, again.stderr
        assert "deepracer-0 has containers already" in again.stderr
        assert "start.sh" not in again.stderr
    assert {c["Id"] for c in containers(bed, "deepracer-0")} == {coach["Id"], simulator["Id"]}
    assert len(sagemaker_trainers(bed)) == 1

    # A second run asking for the GPU run 0's trainer holds is refused, and run 0 stays.
    checkout.set("run-1.env", **{"DR_RUN_ID": "1"})
    second = checkout.drgpu(checkout.activated("run-1.env"), "up")

    assert second.returncode == 3, second.stderr
    assert "is held by run '0'" in second.stderr
    assert containers(bed, "deepracer-1") == []
    assert {c["Id"] for c in containers(bed, "deepracer-0")} == {coach["Id"], simulator["Id"]}
    assert all(c["State"]["Running"] for c in containers(bed, "deepracer-0"))

    # A SageMaker trainer told another GPU is a violation for status and cuda-check.
    bed.docker(
        "run", "-d", "--name", "tmpwrong0-algo-2-wrong-1", "--network", "none", "--init",
        "--gpus", "all", "-e", f"CUDA_VISIBLE_DEVICES={GPU0}", bed.image, "sleep", "infinity",
    )  # fmt: skip
    # Run 1's leftover trainer (its RUN_ID, its rl_coach gone) is not run 0's to answer for.
    bed.docker(
        "run", "-d", "--name", "tmpleft1-algo-1-left1-1", "--network", "none", "--init",
        "-e", "RUN_ID=1", "-e", f"CUDA_VISIBLE_DEVICES={GPU2}", bed.image, "sleep", "infinity",
    )  # fmt: skip
    status = checkout.drgpu(shell, "status")
    assert status.returncode == 6
    wrong = "tmpwrong0-algo-2-wrong-1 of run 0 has CUDA_VISIBLE_DEVICES=0: NVIDIA GeForce GTX 1650"
    assert wrong in status.stderr
    document = json.loads(checkout.drgpu(shell, "status", "--json").stdout)
    runs = {t["container"]: t["run_id"] for t in document["sagemaker_trainers"]}
    assert runs["tmpwrong0-algo-2-wrong-1"] == "0"
    assert "tmpleft1-algo-1-left1-1" not in runs  # run 1's: not judged as run 0's
    # Its process on the GPU run 0's rl_coach forwards is run 1's stray, not run 0's.
    pid = int(bed.docker("inspect", "-f", "{{.State.Pid}}", "tmpleft1-algo-1-left1-1").stdout)
    topology = copy.deepcopy(THREE_GPUS)
    [forwarded] = [gpu for gpu in topology["gpus"] if gpu["uuid"] == GPU2]
    forwarded["processes"] = [{"pid": pid, "used_memory_mib": 700}]
    bed.set_topology(topology)
    document = json.loads(checkout.drgpu(shell, "status", "--json").stdout)
    [process] = [p for p in document["processes"] if p["pid"] == pid]
    assert (process["verdict"], process["run_id"]) == ("stray", "1")
    bed.set_topology(THREE_GPUS)
    bed.docker("rm", "-f", "tmpleft1-algo-1-left1-1")
    checked = checkout.drgpu(shell, "cuda-check", "--all")
    assert checked.returncode == 6, checked.stderr + checked.stdout
    bed.docker("rm", "-f", "tmpwrong0-algo-2-wrong-1")

    # Evaluation is its own project, started by DRfC's evaluation script; on a GPU the
    # training does not hold it runs beside the training, which it never touches.
    checkout.set("system.env", DR_ROBOMAKER_CUDA_DEVICES="1")
    evaluation = checkout.drgpu(shell, "up", "--eval")
    assert evaluation.returncode == 0, evaluation.stderr
    (evaluator,) = services(bed, "deepracer-eval-0")["robomaker"]
    assert device_ids(evaluator) == [GPU1]
    assert evaluator["Config"]["Cmd"][-1] == "/opt/ml/code/run.sh run evaluation.launch.py"
    assert {c["Id"] for c in containers(bed, "deepracer-0")} == {coach["Id"], simulator["Id"]}
    stopped_evaluation = checkout.drgpu(shell, "down", "--eval")
    assert stopped_evaluation.returncode == 0, stopped_evaluation.stderr
    assert containers(bed, "deepracer-eval-0") == []
    assert all(c["State"]["Running"] for c in containers(bed, "deepracer-0"))

    checkout.set("run.env", DRGPU_SHARNG="timeslice")  # a typo'd key: down stops all the same
    stopped = checkout.drgpu(shell, "down")

    assert stopped.returncode == 0, stopped.stderr
    assert "DRGPU_SHARNG: unknown drgpu setting" in stopped.stderr
    assert containers(bed, "deepracer-0") == []
    assert "drgpu: removed " in stopped.stderr and " of deepracer-0\n" in stopped.stderr
    assert sagemaker_trainers(bed) == []  # DRfC's stop script stops rl_coach's trainer
    # DRfC's start refuses to train over the model it made (without -w): said, with how.
    run_env = checkout.root / "run.env"
    run_env.write_text(run_env.read_text().replace("DRGPU_SHARNG=timeslice\n", ""))
    over = checkout.drgpu(shell, "up")
    assert over.returncode == 5
    assert "use -w option" in over.stderr and "drgpu up -- -w" in over.stderr
    assert containers(bed, "deepracer-0") == []
    assert not (checkout.root / ".drgpu").exists()


def test_three_workers_on_two_gpus_survive_drfc_scale(bed: Any, checkout: Checkout) -> None:
    checkout.set("system.env", DR_WORKERS="3", DR_ROBOMAKER_CUDA_DEVICES="0,1")
    shell = checkout.activated()

    started = checkout.drgpu(shell, "up")

    assert started.returncode == 0, started.stderr
    stack = services(bed, "deepracer-0")
    assert sorted(stack) == ["rl_coach", "robomaker-1", "robomaker-2", "robomaker-3"]
    placed = {name: device_ids(found[0]) for name, found in stack.items() if name != "rl_coach"}
    assert placed == {"robomaker-1": [GPU0], "robomaker-2": [GPU1], "robomaker-3": [GPU0]}
    for (worker,) in (stack[f"robomaker-{slot}"] for slot in (1, 2, 3)):
        assert worker["Config"]["Cmd"][-1] == (
            "/opt/ml/code/run.sh multi distributed_training.launch.py"
        )
        assert any(m["Destination"] == "/mnt/comms" for m in worker["Mounts"])
    # DRfC's own stop without drgpu's exports leaves drgpu's workers (Compose's orphans):
    # an up refuses to start a new trainer beside them.
    assert checkout.bash(shell, "dr-stop-training").returncode == 0
    assert sorted(services(bed, "deepracer-0")) == ["robomaker-1", "robomaker-2", "robomaker-3"]
    refused = checkout.drgpu(shell, "up", "--", "-w")
    assert refused.returncode == 5, refused.stderr
    assert "robomaker-1, robomaker-2, robomaker-3 still run without rl_coach" in refused.stderr
    exports = checkout.drgpu(shell, "drfc-env")  # for DRfC's own start: said, not refused
    assert exports.returncode == 0 and "DRfC's start would keep them" in exports.stderr
    assert sorted(services(bed, "deepracer-0")) == ["robomaker-1", "robomaker-2", "robomaker-3"]
    stopped = checkout.drgpu(shell, "down")
    assert stopped.returncode == 0, stopped.stderr

    # DRfC's own commands, with the exports `drgpu drfc-env` prints: the same three
    # simulators (robomaker's replicas run `true` and exit), and the stop removes all.
    exports = checkout.drgpu(shell, "drfc-env")
    assert exports.returncode == 0, exports.stderr
    started_by_drfc = checkout.bash(shell, f"{exports.stdout}\ndr-start-training -q -w")
    assert started_by_drfc.returncode == 0, started_by_drfc.stderr
    stack = services(bed, "deepracer-0")
    running = [c for found in stack.values() for c in found if c["State"]["Running"]]
    simulators = [c for c in running if device_ids(c)]
    assert sorted(device_ids(c)[0] for c in simulators) == sorted([GPU0, GPU0, GPU1])
    assert all(not device_ids(c) for c in stack["robomaker"])
    # That shell's list now names drgpu's override (two YAML documents): drgpu reads only
    # the user's files from it, and drfc-env run again names its override once.
    again = checkout.bash(shell, f"{exports.stdout}\ndrgpu plan >/dev/null && drgpu drfc-env")
    assert again.returncode == 0, again.stderr
    assert again.stdout.count(".override.yml") == 1
    stopped_by_drfc = checkout.bash(shell, f"{exports.stdout}\ndr-stop-training")
    assert stopped_by_drfc.returncode == 0, stopped_by_drfc.stderr
    assert containers(bed, "deepracer-0") == []


def test_a_start_script_that_started_nothing_is_quoted_in_the_error(
    bed: Any, checkout: Checkout
) -> None:
    # DRfC's start script exits 0 with -q whatever Compose said; here Compose refuses (the
    # external network activation creates is gone), and the user hears Compose's reason.
    shell = checkout.activated()
    assert checkout.drgpu(shell, "drfc-env").returncode == 0  # its override is there before
    bed.docker("network", "rm", "sagemaker-local", check=False)

    started = checkout.drgpu(shell, "up")

    assert started.returncode == 5, started.stderr
    lines = started.stderr.splitlines()
    error = next(i for i, line in enumerate(lines) if line.startswith("drgpu: error: "))
    assert "service rl_coach has no container" in lines[error]
    assert lines[error + 1].startswith("  hint: scripts/training/start.sh said last: ")
    assert "sagemaker-local" in lines[error + 1]
    assert containers(bed, "deepracer-0") == []
    assert not (checkout.root / ".drgpu" / "deepracer-0.override.yml").exists()  # nothing left
