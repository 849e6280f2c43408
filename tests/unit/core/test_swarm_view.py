"""core/swarm_view.py judges the swarm from the manager's records (host/swarm_engine's
swarm_picture reads them: here recorded answers of a 2.x engine's /nodes, /services and
/tasks)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from drgpu.core.facts import TaskFacts
from drgpu.core.findings import Level
from drgpu.core.swarm_view import SwarmState, swarm_findings, swarm_reasons, task_containers
from drgpu.host import swarm_engine
from drgpu.host.docker_api import Answer

MANAGER, WORKER = "m" * 25, "w" * 25
G_M, G_W = "GPU-11111111-0000-4000-8000-000000000000", "GPU-22222222-0000-4000-8000-000000000000"


def node(node_id: str, state: str, gpu: str, role: str = "worker") -> dict[str, Any]:
    resource = {"NamedResourceSpec": {"Kind": "NVIDIA-GPU", "Value": gpu}}
    return {
        "ID": node_id,
        "Spec": {"Role": role, "Availability": "active", "Labels": {"Robomaker": "true"}},
        "Description": {"Hostname": "bed", "Resources": {"GenericResources": [resource]}},
        "Status": {"State": state},
    }


def task(task_id: str, on: str, state: str, desired: str = "running", err: str = "") -> Any:
    labels = {"drgpu.run_id": "0", "com.docker.stack.namespace": "deepracer-0"}
    return {
        "ID": task_id,
        "ServiceID": "svc",
        "Slot": 1,
        "NodeID": on,
        "DesiredState": desired,
        "Status": {"State": state, "Err": err},
        "Spec": {"ContainerSpec": {"Labels": labels, "Env": ["A=1"]}},
        "GenericResources": [{"NamedResourceSpec": {"Kind": "NVIDIA-GPU", "Value": G_W}}],
    }


class Engine:
    """A manager answering recorded /nodes, /services and /tasks (503: no manager)."""

    def __init__(self, nodes: list[Any] | None, tasks: list[Any]) -> None:
        self.answers = {
            "/nodes": nodes,
            "/services": [{"ID": "svc", "Spec": {"Name": "deepracer-0_robomaker"}}],
            "/tasks": tasks,
        }

    def call(self, method: str, path: str) -> Answer:
        body = self.answers[path]
        status = 503 if body is None else 200
        return Answer(status, json.dumps(body if body is not None else {}).encode())


def judged(nodes: list[Any], tasks: list[Any], run_id: str | None = None) -> list[Any]:
    swarm = swarm_engine.swarm_picture(Engine(nodes, tasks), MANAGER)  # type: ignore[arg-type]
    assert swarm is not None and swarm.seen == (MANAGER,)
    return swarm_findings(swarm, run_id)


def test_a_healthy_swarm_still_says_a_worker_node_was_not_seen() -> None:
    nodes = [node(MANAGER, "ready", G_M, "manager"), node(WORKER, "ready", G_W)]
    findings = judged(nodes, [task("t1", WORKER, "running")])
    assert [(f.level, f.kind, f.facts["node"]) for f in findings] == [
        (Level.WARN, "node-unseen", WORKER)
    ]
    assert findings[0].subject == f"node bed ({WORKER[:12]})"


def test_a_task_the_manager_rejected_on_a_lost_node_may_still_run() -> None:
    """As a 2-node bed's manager recorded it once the worker's dockerd was killed: the
    started task rejected, desired shutdown; its replacement pending, desired ready."""
    nodes = [node(MANAGER, "ready", G_M, "manager"), node(WORKER, "down", G_W)]
    gone = "assigned node no longer meets constraints"
    lost = task("t1", WORKER, "rejected", desired="shutdown", err=gone)
    lost["Status"]["ContainerStatus"] = {"ContainerID": "c" * 64, "PID": 4242}
    err = "no suitable node (1 node not available for new tasks)"
    findings = judged(nodes, [lost, task("t2", "", "pending", desired="ready", err=err)])
    assert [(f.level, f.kind) for f in findings] == [
        (Level.FAIL, "task-pending"),
        (Level.FAIL, "node-down"),
        (Level.FAIL, "task-on-lost-node"),
    ]
    assert findings[2].facts["gpus"] == [G_W]
    assert findings[2].message == (
        f"task deepracer-0_robomaker.1 (t1) on node bed ({WORKER[:12]}) is rejected, but may"
        f" still run on node bed ({WORKER[:12]}), which the manager has lost, holding its GPUs"
    )
    assert findings[1].message == f"node bed ({WORKER[:12]}) is down, holding 1 task(s) of a run"
    never_started = task("t1", WORKER, "rejected", desired="shutdown", err=gone)
    assert [(f.level, f.kind) for f in judged(nodes, [never_started])] == [
        (Level.FAIL, "task-stopped"),  # nothing replaces it
        (Level.WARN, "node-down"),
    ]


def test_a_slot_swarm_gave_up_is_a_violation_and_a_replaced_one_is_not() -> None:
    """As a 2-node bed's manager recorded a simulator killed on the worker: DRfC's restart
    condition none leaves its slot empty."""
    nodes = [node(MANAGER, "ready", G_M, "manager"), node(WORKER, "ready", G_W)]
    err = "task: non-zero exit (137)"
    killed = task("t1", WORKER, "failed", desired="shutdown", err=err)
    found = [f for f in judged(nodes, [killed]) if f.kind != "node-unseen"]
    assert [(f.level, f.kind, f.facts["task"]) for f in found] == [
        (Level.FAIL, "task-stopped", "t1")
    ]
    assert found[0].message == (
        f"task deepracer-0_robomaker.1 (t1) on node bed ({WORKER[:12]}) is failed ({err});"
        " Swarm runs no task in its place (its restart condition, or no node for it)"
    )
    replaced = [killed, task("t2", MANAGER, "running")]
    ended = task("t3", WORKER, "complete", desired="shutdown")
    scaled_down = task("t4", WORKER, "shutdown", desired="remove")
    assert [f.kind for f in judged(nodes, replaced)] == ["node-unseen"]
    assert [(f.level, f.kind) for f in judged(nodes, [ended])] == [
        (Level.WARN, "task-ended"),
        (Level.WARN, "node-unseen"),
    ]
    assert [f.kind for f in judged(nodes, [scaled_down])] == ["node-unseen"]
    done = task("t5", WORKER, "complete", desired="shutdown")  # DRfC's evaluation rl_coach
    del done["GenericResources"]
    assert [f.kind for f in judged(nodes, [done])] == ["node-unseen"]
    # the slot's newest task tells: failed, then replaced by one that completed
    killed["Version"], ended["Version"] = {"Index": 10}, {"Index": 12}
    assert [f.kind for f in judged(nodes, [ended, killed])] == ["task-ended", "node-unseen"]
    assert [f.kind for f in judged(nodes, [killed], run_id="1")] == ["node-unseen"]
    assert found[0].facts["service"] == "robomaker"  # the compose service, as elsewhere
    run = task("t7", WORKER, "failed", desired="shutdown")  # DR_RUN_ID=my_run: its stack's
    run["Spec"]["ContainerSpec"]["Labels"]["com.docker.stack.namespace"] = "deepracer-my_run"
    swarm = swarm_engine.swarm_picture(Engine(nodes, [run]), MANAGER)  # type: ignore[arg-type]
    assert swarm is not None
    swarm = replace(
        swarm, tasks=tuple(replace(t, service="deepracer-my_run_robomaker") for t in swarm.tasks)
    )
    [stopped] = [f for f in swarm_findings(swarm) if f.kind == "task-stopped"]
    assert stopped.facts["service"] == "robomaker"
    back = task("t6", WORKER, "running", desired="shutdown")  # its node came back
    [stopping] = [f for f in judged(nodes, [back]) if f.kind == "task-stopped"]
    assert stopping.message.endswith(
        "is running, but Swarm is shutting it down and runs no task in its place"
    )


def test_a_down_node_without_tasks_is_a_warning() -> None:
    nodes = [node(MANAGER, "ready", G_M, "manager"), node(WORKER, "down", G_W)]
    assert [(f.level, f.kind) for f in judged(nodes, [])] == [(Level.WARN, "node-down")]


def test_a_task_pending_for_gpus_is_a_violation_naming_the_engines_error() -> None:
    err = "no suitable node (insufficient resources on 2 nodes)"
    nodes = [node(MANAGER, "ready", G_M, "manager")]
    findings = judged(nodes, [task("t2", "", "pending", err=err)])
    assert [(f.level, f.kind) for f in findings] == [(Level.FAIL, "task-pending")]
    assert findings[0].message == f"task deepracer-0_robomaker.1 (t2) on no node is pending: {err}"
    assert judged(nodes, [task("t2", "", "pending", err=err)], run_id="other") == []


def test_tasks_of_other_stacks_are_not_drgpus_and_a_worker_engine_is_no_manager() -> None:
    foreign = task("t3", MANAGER, "pending")
    foreign["Spec"]["ContainerSpec"]["Labels"] = {}
    swarm = swarm_engine.swarm_picture(Engine([], [foreign]), MANAGER)  # type: ignore[arg-type]
    assert swarm is not None and swarm.tasks == ()
    assert swarm_engine.swarm_picture(Engine(None, []), MANAGER) is None  # type: ignore[arg-type]


def test_reserving_services_lose_their_per_gpu_reasons_and_an_explicit_setting_is_said() -> None:
    reasons = (
        "simulators (auto): GPU 1: the most free",
        "robomaker-1: GPU 1: spread: worker 1 of 2, round-robin over GPUs 1",
        "robomaker: GPU 1: spread",
        "sagemaker: GPU 0: asked for",
    )
    setting = "DR_ROBOMAKER_CUDA_DEVICES=1"
    kept, said = swarm_reasons(reasons, ["robomaker"], setting)
    assert kept == (
        "sagemaker: GPU 0: asked for",
        "robomaker: the engine chooses among the GPUs its node advertises",
    )
    assert said[0].startswith("DR_ROBOMAKER_CUDA_DEVICES=1 is not how the simulators get")
    assert swarm_reasons(reasons, [], setting) == (reasons, ())  # all pinned: all apply


def test_tasks_on_another_node_hold_what_the_engine_reserved_or_drgpu_pinned() -> None:
    reserving = TaskFacts(
        "t1", "deepracer-0_robomaker", 1, WORKER, "running", "running", "", run_id="0",
        generic_resources=(("NVIDIA-GPU", G_W),), container_id="c1",
    )  # fmt: skip
    pinned = replace(  # DR_ROBOMAKER_CUDA_DEVICES naming the worker's GPU: pinned there
        reserving, id="t2", slot=2, generic_resources=(), container_id="c2",
        labels={"drgpu.run_id": "0", "drgpu.gpus": G_M},
    )  # fmt: skip
    swarm = SwarmState((), (reserving, pinned), ())
    held = {c.id: c.labels["drgpu.gpus"] for c in task_containers(swarm, WORKER)}
    assert held == {"c1": G_W, "c2": G_M}
