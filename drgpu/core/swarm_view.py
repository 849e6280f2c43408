"""`drgpu status` on a swarm manager: the whole swarm as the manager records it, judged; only
the GPUs of the nodes in `seen` were read (this node's through NVML, others' by a job on each)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from drgpu.core import labels
from drgpu.core.facts import ContainerFacts, NodeFacts, TaskFacts
from drgpu.core.findings import Finding, Level
from drgpu.core.swarm_node import reserved_gpus

RUNNING = "running"


@dataclass(frozen=True)
class SwarmState:
    """The swarm as its manager records it (every node, every task of drgpu's runs) and what
    was read inside its nodes: `seen`, others' verdicts, why a node was not (by node id)."""

    nodes: tuple[NodeFacts, ...]
    tasks: tuple[TaskFacts, ...]
    seen: tuple[str, ...]
    node_findings: tuple[Finding, ...] = ()
    unseen_why: Mapping[str, str] = field(default_factory=dict)
    here: str = ""  # this node's id


def swarm_findings(swarm: SwarmState, run_id: str | None = None) -> list[Finding]:
    """A node not ready (FAIL when it holds a run's tasks) and its tasks that may still run, a
    task pending, a slot Swarm gave up (FAIL; WARN where a GPU task's ended with status 0, none
    for another's), a node whose GPUs were not read; of `run_id`'s tasks only, unless None."""
    ours = [t for t in swarm.tasks if run_id is None or t.run_id == run_id]
    named = {node.id: node for node in swarm.nodes}
    findings = [
        _task_finding(t, named, f"is {t.state}: {t.error or 'not placed'}", "task-pending")
        for t in ours
        if t.desired_state in _WANTED and t.state in ("new", "pending", "assigned")
    ]
    not_ready = {node.id for node in swarm.nodes if node.state != "ready"}
    for task in given_up(ours):
        if may_run(task) and task.node_id in not_ready:
            continue  # a lost node's task, said below
        why = f"is {task.state} ({task.error or 'no error given'}); {GIVEN_UP}"
        if task.state == RUNNING:  # a node back after the manager gave its task up
            why = "is running, but Swarm is shutting it down and runs no task in its place"
        if task.state != "complete":
            findings.append(_task_finding(task, named, why, "task-stopped"))
        elif task_gpus(task) or task.labels.get(labels.FORWARDED_GPUS):  # its work may be done
            findings.append(_task_finding(task, named, why, "task-ended", Level.WARN))
    findings += swarm.node_findings
    for node in swarm.nodes:
        held = [
            t for t in ours if t.node_id == node.id and (t.desired_state in _WANTED or may_run(t))
        ]
        facts = {"node": node.id, "state": node.state}
        if node.state != "ready":
            level = Level.FAIL if held else Level.WARN
            holding = f", holding {len(held)} task(s) of a run" if held else ""
            message = f"{node.name} is {node.state}{holding}"
            findings.append(Finding(node.name, level, message, kind="node-down", facts=facts))
            lost = f"may still run on {node.name}, which the manager has lost, holding its GPUs"
            findings.extend(
                _task_finding(t, named, f"is {t.state}, but {lost}", "task-on-lost-node")
                for t in held
                if may_run(t)
            )
        elif node.id not in swarm.seen and (held or node.advertised_gpus):
            why = swarm.unseen_why.get(node.id, "only the manager's records of its tasks read")
            unseen = f"{node.name}: GPUs not seen, {why}"
            findings.append(Finding(node.name, Level.WARN, unseen, kind="node-unseen", facts=facts))
    return sorted(findings, key=lambda f: f.level != Level.FAIL)


_WANTED = ("ready", RUNNING)  # a new task's desired state is ready, then running
GIVEN_UP = "Swarm runs no task in its place (its restart condition, or no node for it)"


def given_up(tasks: Iterable[TaskFacts]) -> list[TaskFacts]:
    """The newest task of each slot that Swarm neither runs nor replaces any more: none of its
    tasks is wanted, nor removed on purpose (a scale down)."""
    slots: dict[tuple[str, int | str], list[TaskFacts]] = {}
    for task in tasks:
        slots.setdefault(slot_of(task), []).append(task)
    return [
        max(slot, key=lambda t: t.version)
        for slot in slots.values()
        if all(t.desired_state not in (*_WANTED, "remove") for t in slot)
    ]


def replaced(containers: Iterable[ContainerFacts], tasks: Iterable[TaskFacts] | None) -> set[str]:
    """The ids of this node's task containers that Swarm replaced. With the manager's `tasks`:
    each whose task it shuts down or removed, but the newest of a slot it gave up. Without them
    (on a worker): each exited or dead one of a slot with a newer one here, or one running or
    starting."""
    if tasks is not None:
        tasks = list(tasks)
        kept = {t.container_id for t in given_up(tasks)}
        return {
            t.container_id
            for t in tasks
            if t.desired_state not in _WANTED and t.container_id not in kept
        }
    slots: dict[tuple[str, ...], list[ContainerFacts]] = {}
    for c in containers:
        if name := c.labels.get(labels.SWARM_TASK_NAME):  # <service>.<slot>.<task id>
            slots.setdefault(tuple(name.rsplit(".", 2)[:-1]), []).append(c)
    ended = ("exited", "dead")
    return {
        c.id
        for slot in slots.values()
        for c in sorted(slot, key=lambda c: (c.state not in ended, c.started_at or 0.0))[:-1]
        if c.state in ended
    }


def slot_of(task: TaskFacts) -> tuple[str, int | str]:
    """The slot a task fills: its service's replica number (a global service's: its node)."""
    return task.service, task.slot or task.node_id


def may_run(task: TaskFacts) -> bool:
    """Whether its container may still run: running, or started and then marked by the
    manager alone (rejected, orphaned: what a lost node's tasks become)."""
    return task.state == RUNNING or (task.started and task.state in ("rejected", "orphaned"))


def _task_finding(
    task: TaskFacts, nodes: dict[str, NodeFacts], message: str, kind: str, level: Level = Level.FAIL
) -> Finding:
    facts: dict[str, Any] = {"task": task.id, "node": task.node_id, "run_id": task.run_id}
    gpus = list(task_gpus(task))
    # its compose service, as the other findings name it (Swarm's is `<stack>_<service>`)
    stack = task.labels.get(labels.SWARM_STACK)
    facts.update(gpus=gpus, service=task.service.removeprefix(f"{stack}_"))
    facts.update(gpu_uuid=gpus[0] if len(gpus) == 1 else None)
    where = node.name if (node := nodes.get(task.node_id)) else "no node"
    subject = f"task {task.service}.{task.slot} ({task.id[:12]}) on {where}"
    return Finding(subject, level, f"{subject} {message}", kind=kind, facts=facts)


def task_containers(swarm: SwarmState, node_id: str) -> list[ContainerFacts]:
    """The tasks of drgpu's runs that may run on a node, as containers holding `task_gpus`, so
    that its GPUs are judged like this node's."""
    return [
        ContainerFacts(
            id=task.container_id,
            name=f"{task.service}.{task.slot} on node {node_id[:12]}",
            service=task.service,
            project="",
            state=RUNNING,
            labels={labels.RUN_ID: task.run_id, labels.GPUS: ",".join(task_gpus(task))},
        )
        for task in swarm.tasks
        if task.node_id == node_id and task.container_id and may_run(task)
    ]


def task_stand_in(project: str, task: TaskFacts) -> ContainerFacts:
    """A task on another node (or on none yet) as `judge` sees a container there: its spec's
    labels and environment, Swarm's task labels, and the GPUs the engine reserved for it."""
    reserved = ",".join(reserved_gpus(task))
    swarm = {labels.SWARM_TASK_NAME: f"{task.service}.{task.slot}.{task.id}"}
    where = f"on node {task.node_id[:12]}" if task.node_id else "on no node yet"
    return ContainerFacts(
        id=task.id,
        name=f"{task.service}.{task.slot} {where}",
        service=task.service.removeprefix(f"{project}_"),
        project=project,
        state=task.state,
        labels={**task.labels, **swarm, labels.SWARM_NODE_ID: task.node_id},
        environment={**task.environment, labels.SWARM_RESOURCE_VARIABLE: reserved},
    )


def task_gpus(task: TaskFacts) -> tuple[str, ...]:
    """The GPUs a task holds: those the engine reserved for it, else those drgpu pinned."""
    return reserved_gpus(task) or labels.given_gpus(task_stand_in("", task))


def swarm_reasons(
    explanations: Collection[str], reserving: Collection[str], setting: str | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The plan's reasons that apply on the swarm (a reserving service's GPUs are the engine's
    choice), and a warning that an explicit simulator `setting` (`KEY=value`) does not apply."""
    chooses = {*reserving, *(("simulators (auto)",) if reserving else ())}
    kept = tuple(
        line
        for line in explanations
        if not {line.split(":")[0], line.split(":")[0].rsplit("-", 1)[0]} & chooses
    )
    chosen = tuple(
        f"{name}: the engine chooses among the GPUs its node advertises" for name in reserving
    )
    said = (
        f"{setting} is not how the simulators get GPUs on this swarm: they reserve NVIDIA-GPU"
        " generic resources and the engine chooses among the GPUs each node advertises"
        " (`drgpu swarm-setup` sets them); DRGPU_SWARM_GPUS=pin pins them on this node"
    )
    return (*kept, *chosen), (said,) if reserving and setting else ()
