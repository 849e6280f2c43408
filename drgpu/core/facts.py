"""What the Docker engine says, as frozen facts: host.engine reads them, the core judges them."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from drgpu.core.redaction import URL_PASSWORD

CDI_GPU_PREFIX = "nvidia.com/gpu="  # a CDI device name of an NVIDIA GPU: <prefix><name>


@dataclass(frozen=True)
class DeviceRequestFacts:
    """One device request of a container, as the engine stored it."""

    driver: str
    device_ids: tuple[str, ...]
    count: int
    capabilities: tuple[str, ...]


@dataclass(frozen=True)
class ContainerFacts:
    """What the engine says about one container."""

    id: str
    name: str
    service: str
    project: str
    state: str
    labels: Mapping[str, str] = field(default_factory=dict)
    environment: Mapping[str, str] = field(default_factory=dict)
    device_requests: tuple[DeviceRequestFacts, ...] = ()
    ipc_mode: str = ""
    exit_code: int | None = None
    started_at: float | None = None  # seconds since the epoch, as the engine says

    @property
    def stopped(self) -> bool:
        """Whether the container is not running any more (or never ran)."""
        return self.state in ("exited", "dead", "created", "restarting", "removing")

    def stop_problem(self, has_gpu: bool) -> str | None:
        """Why its state is wrong, or None: it never started, died or keeps restarting,
        exited non-zero, or exited at all with a GPU (`has_gpu`) to work on."""
        if not self.stopped:
            return None
        if self.state != "exited":
            return f"is {self.state}, not running"
        if self.exit_code is None:
            return "exited"
        if self.exit_code != 0:
            return f"exited with status {self.exit_code}"
        return "exited (status 0), but it was given a GPU to work on" if has_gpu else None


@dataclass(frozen=True)
class ImageFacts:
    """An image present in the engine, and the environment it sets."""

    name: str
    id: str
    environment: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskFacts:
    """What a Swarm manager says about one task of a stack's service."""

    id: str
    service: str
    slot: int
    node_id: str
    state: str
    desired_state: str
    error: str
    environment: Mapping[str, str] = field(default_factory=dict)
    generic_resources: tuple[tuple[str, str], ...] = ()
    run_id: str = ""  # drgpu's run label of its container spec
    labels: Mapping[str, str] = field(default_factory=dict)  # of its container spec
    started: bool = False  # its node reported a container process (ContainerStatus.PID)
    image: str = ""
    container_id: str = ""  # its container's, as its node reported it
    version: int = 0  # the manager's version of its record: the newest is the highest


@dataclass(frozen=True)
class EngineFacts:
    """What `docker info` (and, for doctor, `docker version`) says of this node's engine."""

    version: str
    default_runtime: str
    runtimes: tuple[str, ...]
    generic_resources: tuple[str, ...] = ()
    swarm_state: str = "inactive"
    node_labels: Mapping[str, str] | None = None
    node_id: str = ""
    nodes: tuple[NodeFacts, ...] = ()  # every node of the swarm: on a manager only
    api_version: str = ""
    discovered_devices: tuple[str, ...] = ()  # `<source>:<id>`, e.g. cdi:nvidia.com/gpu=GPU-…
    cgroup_driver: str = ""  # systemd or cgroupfs


_SECRET_WORDS = ("pass", "secret", "token", "key", "auth", "credential")


@dataclass(frozen=True)
class ProcessFacts:
    """What /proc says about a host process: its command line and the user owning it."""

    argv: tuple[str, ...]
    user: str

    @property
    def command(self) -> str:
        """The command line on one line, values of secret-looking options (`--password x`,
        `TOKEN=x`, `--api-key=x`) and URL passwords (`http://bob:x@host`) hidden as `***`;
        `[name]` for a kernel thread."""
        words: list[str] = []
        hide_next = False
        for arg in self.argv:
            name, equals, _ = arg.partition("=")
            secret = any(word in name.lower() for word in _SECRET_WORDS)
            if hide_next:
                words.append("***")
            elif secret and equals:
                words.append(f"{name}=***")
            else:
                words.append(re.sub(URL_PASSWORD, r"://\1:***@", " ".join(arg.split())))
            hide_next = not hide_next and secret and not equals and arg.startswith("-")
        return " ".join(words)


@dataclass(frozen=True)
class NodeFacts:
    """One node of the swarm as the manager records it."""

    id: str
    hostname: str
    role: str
    state: str  # ready, down, unknown, disconnected
    labels: Mapping[str, str] = field(default_factory=dict)
    advertised_gpus: tuple[str, ...] = ()  # its NVIDIA-GPU generic resources
    availability: str = "active"  # active, pause, drain: whether it takes new tasks

    @property
    def name(self) -> str:
        """How findings name it: hostnames repeat across nodes, ids do not."""
        return f"node {self.hostname} ({self.id[:12]})"


def advertised(nodes: Collection[NodeFacts]) -> list[str]:
    """What each node offers reserving simulators: its role, labels and advertised GPUs."""
    return [
        f"{node.name}, {node.role}{''.join(f', {k}={v}' for k, v in node.labels.items())}:"
        f" advertises {', '.join(node.advertised_gpus) if node.advertised_gpus else 'no GPU'}"
        for node in nodes
    ]
