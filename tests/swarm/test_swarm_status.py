"""`drgpu status` on a swarm manager judges the whole swarm from the manager's records:
a task of a run pending for GPUs is a violation (exit 6), named with the engine's error;
`drgpu plan` there lists each node's advertised GPUs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NewRun
from tests.support.runners import run_drgpu
from tests.swarm.conftest import GPU_UUIDS

pytestmark = pytest.mark.docker


def test_a_task_pending_for_gpus_fails_status(swarm_bed: Any, new_run: NewRun) -> None:
    run_id = new_run()
    name = f"drgpu-pending-{run_id}"
    swarm_bed.docker(
        "service", "create", "--detach", "--name", name, "--generic-resource", "NVIDIA-GPU=9",
        "--container-label", f"drgpu.run_id={run_id}", swarm_bed.image, "sleep", "infinity",
    )  # fmt: skip
    try:
        status = run_drgpu("status", "--json", "--run-id", run_id, env=swarm_bed.env())
        assert status.returncode == 6, status.stderr
        document = json.loads(status.stdout)
        assert document["ok"] is False
        [pending] = [f for f in document["findings"] if f["kind"] == "task-pending"]
        assert pending["level"] == "fail" and "insufficient resources" in pending["message"]
        assert pending["subject"].startswith(f"task {name}.1 ")
        [node] = document["swarm"]["nodes"]  # the manager's records, in --json
        assert (node["state"], node["gpus_seen"], len(node["advertised_gpus"])) == (
            "ready",
            True,
            3,
        )
        [task] = document["swarm"]["tasks"]
        assert (task["service"], task["state"], task["desired_state"]) == (
            name,
            "pending",
            "running",
        )
        other = run_drgpu("status", "--json", "--run-id", f"{run_id}-other", env=swarm_bed.env())
        assert other.returncode == 0, other.stdout  # another run's pending task is not its
    finally:
        swarm_bed.docker("service", "rm", name)


def test_plan_on_the_manager_lists_the_nodes_advertised_gpus(
    swarm_bed: Any, tmp_path: Path
) -> None:
    compose = tmp_path / "stack.yml"
    compose.write_text("services:\n  sagemaker: {image: busybox}\n  robomaker: {image: busybox}\n")
    env_file = tmp_path / "system.env"
    env_file.write_text("DR_DOCKER_STYLE=swarm\nDR_SAGEMAKER_CUDA_DEVICES=2\n")
    args = ["plan", "--json", "--env-file", str(env_file), "-f", str(compose)]
    planned = run_drgpu(*args, env=swarm_bed.env())
    assert planned.returncode == 0, planned.stderr
    [node] = json.loads(planned.stdout)["swarm"]["nodes"]
    assert sorted(node["advertised_gpus"]) == sorted(GPU_UUIDS)
    assert (node["role"], node["state"], node["labels"]["Robomaker"]) == (
        "manager",
        "ready",
        "true",
    )
