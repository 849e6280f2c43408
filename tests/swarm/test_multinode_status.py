"""`drgpu status` on the manager of a multi-node swarm (the `two_node_swarm` bed: a
tests/support/swarm_nodes.Swarm of 2 nodes): a worker node with none of drgpu's tasks is
not seen from the manager (a warning, never `ok: true`); once one runs there, the worker's
GPUs are read on the worker (a job in that task's image), and a process holding a GPU
there outside drgpu's tasks is a violation; a worker whose dockerd was killed is said to
be down within one refresh of Swarm noticing, and its task, which the manager marks
rejected while its container runs on, is a violation, as is the replacement pending."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

from tests.support.runners import run_drgpu

pytestmark = pytest.mark.docker


def test_status_covers_every_node_and_says_a_lost_worker(two_node_swarm: Any) -> None:
    env = two_node_swarm.manager.bed.env()
    workers = two_node_swarm.nodes[1:]
    seen = run_drgpu("status", "--json", env=env)
    document = json.loads(seen.stdout)
    assert seen.returncode == 0 and document["ok"] is False  # the workers' GPUs are unseen
    unseen = {f["node"] for f in document["findings"] if f["kind"] == "node-unseen"}
    assert unseen == {worker.node_id for worker in workers}
    nodes = {node["id"]: node["gpus_seen"] for node in document["swarm"]["nodes"]}
    assert nodes == {node.node_id: node is two_node_swarm.manager for node in two_node_swarm.nodes}
    lost, manager = workers[0], two_node_swarm.manager.bed
    manager.docker(
        "service", "create", "--detach", "--name", "drgpu-on-worker", "--container-label",
        "drgpu.run_id=on-worker", "--constraint", f"node.id=={lost.node_id}", "--generic-resource",
        "NVIDIA-GPU=1", manager.image, "sleep", "infinity",
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while "running" not in _task_states(env):
        assert time.monotonic() < deadline, "the worker's task never ran"
        time.sleep(0.5)
    read = json.loads(run_drgpu("status", "--json", env=env).stdout)
    said = run_drgpu("status", env=env).stdout  # the worker's line: read, its task's GPU
    assert (
        f"({lost.node_id[:12]}), worker, ready, GPUs read there: drgpu-on-worker.1 on GPU-" in said
    )
    assert {n["id"]: n["gpus_seen"] for n in read["swarm"]["nodes"]}[lost.node_id] is True
    assert not [f for f in read["findings"] if f["kind"] == "node-unseen"], read["findings"]
    topology = json.loads(lost.bed.topology_path.read_text())
    mine = [{"pid": os.getpid(), "used_memory_mib": 64}]  # this test: on every worker GPU
    lost.bed.set_topology(
        {**topology, "gpus": [{**g, "processes": mine} for g in topology["gpus"]]}
    )
    try:
        stray = run_drgpu("status", "--json", "--run-id", "on-worker", env=env)
    finally:
        lost.bed.set_topology(topology)
    assert stray.returncode == 6, stray.stdout
    found = [f for f in json.loads(stray.stdout)["findings"] if f["kind"] == "stray"]
    assert found and found[0]["node"] == lost.node_id and found[0]["pid"] == os.getpid()
    assert found[0]["gpu_uuid"] in lost.advertised
    two_node_swarm.kill(lost)
    deadline, down = time.monotonic() + 30, list[Any]()
    while not down and time.monotonic() < deadline:
        states = two_node_swarm.node_states()  # what Swarm says, then what status says
        document = json.loads(run_drgpu("status", "--json", env=env).stdout)
        down = [f for f in document["findings"] if f["kind"] == "node-down"]
        assert down or states[lost.node_id] == "ready"  # never later than one refresh
        time.sleep(0.5)
    failed = run_drgpu("status", "--json", "--run-id", "on-worker", env=env)
    assert failed.returncode == 6, failed.stdout
    kinds = {f["kind"]: f for f in json.loads(failed.stdout)["findings"]}
    assert kinds["node-down"]["node"] == kinds["task-on-lost-node"]["node"] == lost.node_id
    assert kinds["node-down"]["level"] == kinds["task-on-lost-node"]["level"] == "fail"
    assert kinds["task-on-lost-node"]["gpus"][0] in lost.advertised
    assert kinds["task-pending"]["level"] == "fail"  # its replacement: no node may take it
    manager.docker("service", "rm", "drgpu-on-worker")


def _task_states(env: dict[str, str]) -> list[str]:
    document = json.loads(run_drgpu("status", "--json", "--run-id", "on-worker", env=env).stdout)
    return [task["state"] for task in document["swarm"]["tasks"]]
