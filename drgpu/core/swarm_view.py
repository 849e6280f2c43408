"""`drgpu status` on a swarm manager: the whole swarm as the manager records it, judged.

The manager knows every node's state and every task's (desired and actual) state, node
and generic resources, but it cannot look inside another node: only the GPUs of the nodes
in `seen` were read there (this node's through NVML), the others are said to be unseen.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from drgpu.core.facts import TaskFacts
from drgpu.core.findings import Finding, Level

RUNNING = "running"


@dataclass(frozen=True)
class NodeFacts:
    """One node of the swarm as the manager records it (`advertised_gpus`: its NVIDIA-GPU
    generic resources)."""

    id: str
    hostname: str
    role: str
    state: str  # ready, down, unknown, disconnected
    availability: str  # active, pause, drain
    labels: Mapping[str, str] = field(default_factory=dict)
    advertised_gpus: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """How findings name it: hostnames repeat across nodes, ids do not."""
        return f"node {self.hostname} ({self.id[:12]})"


@dataclass(frozen=True)
class SwarmState:
    """The swarm as its manager records it: every node, every task of drgpu's runs, and
    the nodes whose GPUs were read from inside (`seen`: this one's)."""

    nodes: tuple[NodeFacts, ...]
    tasks: tuple[TaskFacts, ...]
    seen: tuple[str, ...]


def swarm_findings(swarm: SwarmState, run_id: str | None = None) -> list[Finding]:
    """Violations and warnings about the swarm: a node not ready (a violation when it
    holds tasks of a run), a task that may still run on such a node (the manager marks it
    rejected, but nobody stopped its container), a task pending, a node whose GPUs were
    not read (not `seen`). `run_id`: only that run's tasks (None: every run)."""
    ours = [t for t in swarm.tasks if run_id is None or t.run_id == run_id]
    named = {node.id: node for node in swarm.nodes}
    findings = [
        _task_finding(
            t, named.get(t.node_id), f"is {t.state}: {t.error or 'not placed'}", "task-pending"
        )
        for t in ours
        if t.desired_state in _WANTED and t.state in ("new", "pending", "assigned")
    ]
    for node in swarm.nodes:
        held = [
            t for t in ours if t.node_id == node.id and (t.desired_state in _WANTED or _may_run(t))
        ]
        facts = {"node": node.id, "state": node.state}
        if node.state != "ready":
            level = Level.FAIL if held else Level.WARN
            message = f"{node.name} is {node.state}" + (
                f", holding {len(held)} task(s) of a run" if held else ""
            )
            findings.append(Finding(node.name, level, message, kind="node-down", facts=facts))
            lost = f"may still run on {node.name}, which the manager has lost, holding its GPUs"
            findings.extend(
                _task_finding(t, node, f"is {t.state}, but {lost}", "task-on-lost-node")
                for t in held
                if _may_run(t)
            )
        elif node.id not in swarm.seen and (held or node.advertised_gpus):
            unseen = f"{node.name}: GPUs not seen, only the manager's records of its tasks read"
            findings.append(Finding(node.name, Level.WARN, unseen, kind="node-unseen", facts=facts))
    return sorted(findings, key=lambda f: f.level != Level.FAIL)


_WANTED = ("ready", RUNNING)  # a new task's desired state is ready, then running


def _may_run(task: TaskFacts) -> bool:
    """Whether its container may still run: running, or started and then marked by the
    manager alone (rejected, orphaned: what a lost node's tasks become)."""
    return task.state == RUNNING or (task.started and task.state in ("rejected", "orphaned"))


def _task_finding(task: TaskFacts, node: NodeFacts | None, message: str, kind: str) -> Finding:
    gpus = [value for _, value in task.generic_resources]
    facts = {"task": task.id, "node": task.node_id, "run_id": task.run_id, "gpus": gpus}
    where = node.name if node is not None else "no node"
    subject = f"task {task.service}.{task.slot} ({task.id[:12]}) on {where}"
    facts["service"] = task.service
    return Finding(subject, Level.FAIL, f"{subject} {message}", kind=kind, facts=facts)


def advertised(nodes: Collection[NodeFacts]) -> list[str]:
    """What each node offers reserving simulators: its role, labels and advertised GPUs."""
    return [
        f"{node.name}, {node.role}{''.join(f', {k}={v}' for k, v in node.labels.items())}:"
        f" advertises {', '.join(node.advertised_gpus) if node.advertised_gpus else 'no GPU'}"
        for node in nodes
    ]


def swarm_reasons(
    explanations: Collection[str], reserving: Collection[str], setting: str | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The plan's reasons that apply on the swarm, and warnings: the GPUs of a reserving
    service are the engine's choice, so its per-GPU reasons go, and an explicit simulator
    `setting` (`KEY=value`) is said not to apply."""
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
