"""`up` proves each GPU task from inside where it runs, on every node of a multi-node
swarm (the `two_node_swarm` fixture of the multi-node bed: tests/support/swarm_nodes):
tasks on the worker node through a one-shot job beside them. A worker whose toolkit ignores
the Swarm resource fails `up`, named by its node. `cuda-check --all` on the manager checks
the worker's tasks the same way, and `status` reads the worker's GPUs there; none of their
jobs leaves a container on any node. A simulator killed there, which nothing replaces,
fails both `status` and `cuda-check`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.runners import run_drgpu
from tests.support.swarm_nodes import wait_for
from tests.swarm.test_swarm_up import service, settings

pytestmark = pytest.mark.docker


def test_tasks_on_the_worker_node_are_proven_from_inside_and_a_broken_toolkit_fails_up(
    two_node_swarm: Any, tmp_path: Path
) -> None:
    manager, worker = two_node_swarm.nodes
    stack = tmp_path / "stack.yml"
    names = ("sagemaker", "robomaker")
    services = {n: service(manager.bed) for n in names}
    services["robomaker"]["deploy"] = {"restart_policy": {"condition": "none"}}  # as DRfC's
    # As DRfC's sagemaker-local: a network every node joined beforehand, so that Docker
    # 20.10's constraint race rejects no task (which nothing would replace).
    network = {"default": {"name": "proof-net", "external": True}}
    stack.write_text(yaml.safe_dump({"services": services, "networks": network}))
    manager.bed.docker("network", "create", "-d", "overlay", "--attachable", "proof-net")
    manager.bed.docker(
        "service", "create", "-d", "--name", "attached", "--mode", "global",
        "--network", "proof-net", "-e", "NVIDIA_VISIBLE_DEVICES=void",
        manager.bed.image, "sleep", "infinity",
    )  # fmt: skip
    replicas = ("service", "ls", "--filter", "name=attached", "--format", "{{.Replicas}}")
    wait_for(lambda: manager.bed.docker(*replicas).stdout.strip() == "2/2", 60, "not attached")
    # Four simulators on four advertised GPUs: two on each node.
    extra = "DRGPU_SWARM_GPUS=generic\n"
    env_file = settings(tmp_path, "proof", workers=4, simulator="auto", extra=extra)
    # Each node's engine at a path of its own, found by node ID as the proof job mounts it.
    sockets = tmp_path / "nodes"
    sockets.mkdir()
    for node in two_node_swarm.nodes:
        engine = node.bed.env()["DOCKER_HOST"].removeprefix("unix://")
        (sockets / f"{node.node_id}.sock").symlink_to(engine)
    env = {**manager.bed.env(), "DRGPU_NODE_SOCKET": f"{sockets}/{{{{.Node.ID}}}}.sock"}

    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=env)

    assert started.returncode == 0, started.stderr
    assert worker.node_id[:12] in started.stdout  # tasks ran there
    assert "not provable" not in started.stdout + started.stderr
    # cuda-check on the manager checks every task where it runs, the worker's too.
    flags = ("--all", "--run-id", "proof", "--env-file", str(env_file))
    checked = run_drgpu("cuda-check", *flags, "--json", env=env)
    assert checked.returncode == 0, checked.stderr
    results = json.loads(checked.stdout)["results"]
    nodes = sorted(r["node"] for r in results if r["service"] == "robomaker")
    assert nodes == sorted([manager.node_id] * 2 + [worker.node_id] * 2), results
    assert all(r["ok"] and r["seen_cuda"] == r["expected"] for r in results), results
    table = run_drgpu("cuda-check", *flags, env=env).stdout
    assert f"on node {worker.node_id[:12]}" in table
    # Without DRGPU_NODE_SOCKET the worker's job mounts the manager's socket path: said.
    blind = run_drgpu("cuda-check", *flags, env=manager.bed.env())
    assert blind.returncode == 5, blind.stderr
    assert f"on node {worker.node_id[:12]} cannot be checked there: " in blind.stderr
    assert "DRGPU_NODE_SOCKET" in blind.stderr
    # On the worker (no manager): its own tasks, and a warning that the others are not.
    on_worker = run_drgpu("cuda-check", *flags, "--json", env=worker.bed.env())
    assert on_worker.returncode == 0, on_worker.stderr
    assert "tasks on other nodes are not checked" in on_worker.stderr
    assert {r["node"] for r in json.loads(on_worker.stdout)["results"]} == {worker.node_id}
    assert run_drgpu("status", env=env).returncode == 0  # reads the worker's GPUs there

    def jobs_left() -> str:
        listed = [
            n.bed.docker("ps", "-a", "--filter", "name=drgpu-", "-q") for n in (manager, worker)
        ]
        return "".join(done.stdout for done in listed)

    wait_for(lambda: not jobs_left(), 20, "the proof and status jobs left containers behind")
    # A simulator killed on the worker: nothing replaces it, and both commands say so.
    task = "label=com.docker.swarm.service.name=deepracer-proof_robomaker"
    victim = worker.bed.docker("ps", "-q", "--filter", task).stdout.split()[0]
    worker.bed.docker("kill", victim)
    deadline, found = time.monotonic() + 30, list[Any]()
    while not found:
        assert time.monotonic() < deadline, "the manager never recorded the task failed"
        said = run_drgpu("status", "--json", "--run-id", "proof", env=env)
        found = [f for f in json.loads(said.stdout)["findings"] if f["kind"] == "task-stopped"]
    assert said.returncode == 6 and found[0]["node"] == worker.node_id, found
    assert "non-zero exit (137)" in found[0]["message"]
    failed = run_drgpu("cuda-check", *flags, env=env)
    assert failed.returncode == 5, failed.stderr
    assert f"on node {worker.node_id[:12]} is failed, not running" in failed.stderr
    stopped = run_drgpu("down", "--env-file", str(env_file), "-f", str(stack), env=env)
    assert stopped.returncode == 0, stopped.stderr
    manager.bed.docker("service", "rm", "attached")

    topology = json.loads(worker.bed.topology_path.read_text())
    worker.bed.set_topology({**topology, "hook_ignores_requests": True})
    try:
        broken = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=env)
    finally:
        worker.bed.set_topology(topology)

    assert broken.returncode == 5, broken.stderr
    assert f"on node {worker.node_id[:12]}: seen from inside" in broken.stderr
    assert f"on node {manager.node_id[:12]}: seen from inside" not in broken.stderr
