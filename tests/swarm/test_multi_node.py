"""Swarm across several engines (tests/support/swarm_nodes): DeepRacer-for-cloud's swarm
style through its own start and stop scripts on a manager and a worker node, and faults (a
worker's dockerd killed and restarted, its link cut and healed). Placement is read from
each node's own engine and hook records, never from drgpu's output."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.e2e.drfc import copy_checkout
from tests.e2e.helpers import SIMULATOR, SPARE, TRAINER
from tests.support.runners import run_drgpu
from tests.support.swarm_nodes import SWARM_RESOURCE, Node, Swarm, wait_for
from tests.swarm.test_drfc_swarm import sagemaker_trainer
from tests.swarm.test_swarm_up import containers, record_of, service, settings

pytestmark = pytest.mark.docker


def stack_containers(node: Node, project: str) -> list[str]:
    """Every container (running or not) of the stack on this node's own engine."""
    label = f"label=com.docker.stack.namespace={project}"
    return node.bed.docker("ps", "-aq", "--filter", label).stdout.split()


def assert_one_holder_each(swarm: Swarm) -> None:
    """No two running containers of any node hold one GPU, and none but the trainer (a
    stack's sagemaker service) holds the trainer's. A SageMaker trainer (algo-*) asks for
    every GPU of its node, as SageMaker's local mode does, and uses only its
    CUDA_VISIBLE_DEVICES: its tests check that instead."""
    held = [entry for entry in swarm.held_gpus() if "algo-" not in entry[1]]
    twice = [gpu for gpu, count in Counter(gpu for _, _, gpu in held).items() if count > 1]
    assert twice == [], held
    assert [e for e in held if e[2] == SPARE and "_sagemaker." not in e[1]] == [], held


def test_drfcs_swarm_style_spans_two_nodes_each_worker_on_its_nodes_gpu(
    two_node_swarm: Swarm, tmp_path: Path
) -> None:
    manager, worker = two_node_swarm.nodes
    checkout = copy_checkout(manager.bed, tmp_path)
    system = checkout.root / "system.env"
    system.write_text(system.read_text().replace("DR_DOCKER_STYLE=compose\n", ""))
    # Four simulators, four advertised GPUs: two on each node. DRfC's default index 0 is
    # ambiguous where several nodes advertise GPUs (refused): the engine chooses instead.
    checkout.set(
        "system.env", DR_WORKERS="4", DRGPU_SWARM_GPUS="generic", DR_ROBOMAKER_CUDA_DEVICES="auto"
    )
    checkout.set("run.env", DR_RUN_ID="7")
    shell = checkout.activated()
    project = "deepracer-7"
    # Docker 20.10's constraint enforcer rejects a generic-resource task when its node's
    # attachments to the overlay network change, and DRfC's `condition: none` never
    # replaces it: a task on sagemaker-local on every node attaches them beforehand.
    manager.bed.docker(
        "service", "create", "-d", "--name", "attached", "--mode", "global",
        "--network", "sagemaker-local", "-e", "NVIDIA_VISIBLE_DEVICES=void",
        manager.bed.image, "sleep", "infinity",
    )  # fmt: skip
    try:
        # Five simulators on four advertised GPUs: refused before DRfC's start runs.
        checkout.set("system.env", DR_WORKERS="5")
        planned = checkout.drgpu(checkout.activated(), "plan")
        assert planned.returncode == 0 and "advertise 4 by UUID" in planned.stderr, planned.stderr
        too_many = checkout.drgpu(checkout.activated(), "up")
        assert too_many.returncode == 3, too_many.stderr
        assert "5 NVIDIA-GPU resource(s) reserved in all" in too_many.stderr
        assert "start.sh" not in too_many.stderr and not stack_containers(manager, project)
        checkout.set("system.env", DR_WORKERS="4")

        started = checkout.drgpu(shell, "up")

        assert started.returncode == 0, started.stderr
        for node in (manager, worker):
            robomakers = [
                task for name, task in containers(node.bed, project).items() if "robomaker" in name
            ]
            assert len(robomakers) == 2, node.node_id
            got = [record_of(node.bed, task["id"]) for task in robomakers]
            assert {r["source"] for r in got} == {SWARM_RESOURCE}
            assert sorted(d for r in got for d in r["devices"]) == sorted(node.advertised)
        assert sorted(manager.advertised) == sorted((SIMULATOR, TRAINER))
        assert containers(worker.bed, project).keys() <= {
            f"{project}_robomaker.{i}" for i in range(1, 5)
        }
        # The trainer stays on the manager's planned GPU (index 2), which no simulator got.
        assert sagemaker_trainer(manager.bed)["CUDA_VISIBLE_DEVICES"] == SPARE
        assert_one_holder_each(two_node_swarm)

        stopped = checkout.drgpu(shell, "down")

        assert stopped.returncode == 0, stopped.stderr
        # Gone on the manager's engine when `down` returns; a worker's engine removes the
        # containers of the tasks the manager removed a moment later (docs/drfc.md).
        assert stack_containers(manager, project) == []
        wait_for(lambda: not stack_containers(worker, project), 60, "the worker kept them")
    finally:
        manager.bed.docker("stack", "rm", project, check=False)
        manager.bed.docker("service", "rm", "attached", check=False)


def test_simulators_named_by_the_workers_uuid_run_there_on_that_gpu(
    two_node_swarm: Swarm, tmp_path: Path
) -> None:
    """DR_ROBOMAKER_CUDA_DEVICES names the GPUs only the worker node advertises (the
    manager's NVML has not got them): each simulator runs on the worker with its own."""
    manager, worker = two_node_swarm.nodes
    stack = tmp_path / "stack.yml"
    services = {name: service(manager.bed) for name in ("sagemaker", "robomaker")}
    stack.write_text(yaml.safe_dump({"services": services}))
    gpus = list(worker.advertised[:2])
    env_file = settings(tmp_path, "pinned", workers=2, simulator=",".join(gpus))
    project = "deepracer-pinned"
    try:
        started = run_drgpu(
            "up", "--env-file", str(env_file), "-f", str(stack), env=manager.bed.env()
        )
        assert started.returncode == 0, started.stderr
        there = containers(worker.bed, project)
        assert sorted(there) == [f"{project}_robomaker.1", f"{project}_robomaker.2"]
        got = [record_of(worker.bed, there[f"{project}_robomaker.{i}"]["id"]) for i in (1, 2)]
        assert [record["devices"] for record in got] == [[gpu] for gpu in gpus]
        assert_one_holder_each(two_node_swarm)
    finally:
        manager.bed.docker("stack", "rm", project, check=False)


def down_is_said(swarm: Swarm, node: Node) -> str | None:
    """Why `drgpu status --json` on the manager fails to say `node` is Down (None: it says
    so, as a violation: exit 6 and `ok: false`)."""
    status = run_drgpu("status", "--json", env=swarm.manager.bed.env())
    if status.returncode != 6:
        return f"status exited {status.returncode} with {node.node_id} down: {status.stderr}"
    document = json.loads(status.stdout)
    said = [f for f in document["findings"] if node.node_id in json.dumps(f)]
    if document["ok"] or not any("down" in json.dumps(f).lower() for f in said):
        return f"no finding says {node.node_id} is down: {document['findings']}"
    return None


@pytest.mark.slow
def test_a_worker_killed_restarted_cut_and_healed_never_shares_a_gpu(
    three_node_swarm: Swarm, tmp_path: Path
) -> None:
    swarm = three_node_swarm
    manager, killed, cut = swarm.nodes
    stack = tmp_path / "stack.yml"
    services = {name: service(manager.bed) for name in ("sagemaker", "robomaker")}
    stack.write_text(yaml.safe_dump({"services": services}))
    # Five simulators over the five GPUs the nodes advertise; the trainer on the manager's L4.
    env_file = settings(
        tmp_path, "faults", workers=5, simulator="", extra="DRGPU_SWARM_GPUS=generic\n"
    )
    project = "deepracer-faults"
    unsaid: list[str] = []

    def node_is(node: Node, state: str) -> None:
        wait_for(
            lambda: swarm.node_states()[node.node_id] == state, 40, f"{node.node_id} not {state}"
        )
        assert_one_holder_each(swarm)

    try:
        started = run_drgpu(
            "up", "--env-file", str(env_file), "-f", str(stack), env=manager.bed.env()
        )
        assert started.returncode == 0, started.stderr
        per_node = [len(containers(node.bed, project)) for node in swarm.nodes]
        assert sum(per_node) == 6 and min(per_node) >= 1, per_node  # 5 simulators, 1 trainer
        assert_one_holder_each(swarm)

        swarm.kill(killed)
        node_is(killed, "down")
        unsaid.append(down_is_said(swarm, killed) or "")
        # A start writes bed.env from its own settings, never from the older bed.env.
        bed_env = killed.bed.dir / "bed.env"
        bed_env.write_text(bed_env.read_text().replace(SWARM_RESOURCE, "STALE"))
        swarm.restart(killed)  # same namespace, address and data root: the same node ID
        assert f"TESTBED_SWARM_RESOURCE='{SWARM_RESOURCE}'" in bed_env.read_text()
        node_is(killed, "ready")

        swarm.link(cut, up=False)
        node_is(cut, "down")
        unsaid.append(down_is_said(swarm, cut) or "")
        swarm.link(cut, up=True)
        node_is(cut, "ready")

        stopped = run_drgpu(
            "down", "--env-file", str(env_file), "-f", str(stack), env=manager.bed.env()
        )
        assert stopped.returncode == 0, stopped.stderr
        wait_for(
            lambda: not any(stack_containers(node, project) for node in swarm.nodes),
            30,
            "the stack's containers are not gone on every node",
        )
    finally:
        manager.bed.docker("stack", "rm", project, check=False)
    assert not any(unsaid), unsaid
