"""A multi-node swarm for the docker-marked tests: 2 or 3 private engines (scripts/testbed),
each dockerd in a named network namespace the test made (drgpu-<pid>-<k>-n<i>), joined over
veth pairs to a bridge in a further namespace of its own (…-br): nothing in the host's
namespace. Nodes talk on 10.223.0.0/24, inside those namespaces only.

Each node has its own fake GPUs (distinct UUIDs), advertises them to Swarm as generic
resources (the manager leaves out its trainer's GPU, as `swarm-setup` has it), runs the
stub NVIDIA runtime whose hook records each container's GPUs under the node's records/,
and carries DeepRacer-for-cloud's labels (manager: Sagemaker and Robomaker; workers:
Robomaker). Facts of this bed: every node has the same hostname (tell nodes by ID), there
is no ip_vs (service virtual IPs do not route), and Down detection follows the dispatcher
heartbeat (2 s here: a node is Down about 6 s after it stops answering).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tests.conftest import TESTBED, Bed, started_bed
from tests.e2e.helpers import SIMULATOR, THREE_GPUS, TRAINER

SWARM_RESOURCE = "DOCKER_RESOURCE_NVIDIA-GPU"
HEARTBEAT = "2s"
_serial = itertools.count(1)


def node_topology(index: int) -> dict[str, Any]:
    """Node `index`'s fake GPUs: THREE_GPUS on the manager (1), on node i two GPUs whose
    UUIDs say the node (GPU-0000000i-...)."""
    if index == 1:
        return THREE_GPUS
    topology = copy.deepcopy(THREE_GPUS)
    topology["gpus"] = topology["gpus"][1:]
    for gpu, slot in zip(topology["gpus"], (1, 2), strict=True):
        gpu["uuid"] = f"GPU-{index:08d}-0000-4000-8000-00000000000{slot}"
    return topology


@dataclass(frozen=True)
class Node:
    """One engine of the swarm: its bed, namespace, address and the GPUs it advertises."""

    bed: Bed
    netns: str
    link: str  # its veth end in the bridge's namespace
    address: str
    settings: dict[str, str]
    gpus: tuple[str, ...]  # every GPU of its topology
    advertised: tuple[str, ...]
    node_id: str

    def pid(self) -> int | None:
        """Its running dockerd's pid, or None."""
        run = _bed_env(self.bed)["BED_RUN_DIR"]
        with contextlib.suppress(OSError, ValueError):
            pid = int(Path(run, "docker.pid").read_text())
            os.kill(pid, 0)
            return pid
        return None

    def running(self) -> dict[str, list[str]]:
        """The GPUs the hook's record says each running container (by name) of this engine got."""
        listed = self.bed.docker("ps", "--no-trunc", "--format", "{{.ID}} {{.Names}}", check=False)
        held = {}
        for container, name in (line.split() for line in listed.stdout.splitlines()):
            path = self.bed.records_dir / f"{container}.json"
            record = json.loads(path.read_text()) if path.exists() else {}
            held[name] = list(record.get("devices") or [])
        return held


@dataclass(frozen=True)
class Swarm:
    """The nodes (the manager first) and the namespace of the bridge joining them."""

    nodes: tuple[Node, ...]
    bridge_netns: str

    @property
    def manager(self) -> Node:
        return self.nodes[0]

    def node_states(self) -> dict[str, str]:
        """Each node's state (ready, down...) as the manager sees it, by node ID."""
        listed = self.manager.bed.docker("node", "ls", "--format", "{{.ID}} {{.Status}}")
        return dict(line.split()[:2] for line in listed.stdout.lower().splitlines())

    def kill(self, node: Node) -> None:
        """SIGKILL the node's dockerd (its containers run on, unmanaged)."""
        pid = node.pid()
        assert pid is not None, f"{node.netns}: no dockerd to kill"
        os.kill(pid, 9)
        wait_for(lambda: node.pid() is None, 10, f"{node.netns}: dockerd still runs")

    def restart(self, node: Node) -> None:
        """Start the node's dockerd again: same namespace, data root and so Swarm identity."""
        started = subprocess.run(
            [str(TESTBED), "start", str(node.bed.dir)],
            env={**os.environ, **node.settings},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert started.returncode == 0, started.stderr

    def link(self, node: Node, up: bool) -> None:
        """Cut (False) or heal (True) the node's link to the bridge."""
        _ip("-n", self.bridge_netns, "link", "set", node.link, "up" if up else "down")

    def held_gpus(self) -> list[tuple[str, str, str]]:
        """(node ID, container, GPU) for every GPU a running container holds, every node."""
        return [
            (node.node_id, container, gpu)
            for node in self.nodes
            if node.pid() is not None
            for container, gpus in node.running().items()
            for gpu in gpus
        ]


def wait_for(done: Callable[[], object], seconds: float, what: str) -> None:
    """Poll `done` every 0.2 s until it is true; fail with `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def _bed_env(bed: Bed) -> dict[str, str]:
    lines = (bed.dir / "bed.env").read_text().splitlines()
    return {key: value.strip("'") for key, _, value in (line.partition("=") for line in lines)}


@contextlib.contextmanager
def _namespaces(count: int) -> Iterator[tuple[str, list[str]]]:
    """The bridge's namespace and `count` node namespaces, each node's eth0 (10.223.0.i)
    joined to the bridge by a veth pair made inside the namespaces."""
    prefix = f"drgpu-{os.getpid()}-{next(_serial)}"
    bridge, nodes = f"{prefix}-br", [f"{prefix}-n{i}" for i in range(1, count + 1)]
    made: list[str] = []
    try:
        for name in (bridge, *nodes):
            _ip("netns", "add", name)
            made.append(name)
            _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", bridge, "link", "add", "br0", "type", "bridge")
        _ip("-n", bridge, "link", "set", "br0", "up")
        for i, name in enumerate(nodes, 1):
            _ip(
                "-n",
                name,
                "link",
                "add",
                "eth0",
                "type",
                "veth",
                "peer",
                "name",
                f"n{i}",
                "netns",
                bridge,
            )
            _ip("-n", bridge, "link", "set", f"n{i}", "master", "br0", "up")
            _ip("-n", name, "addr", "add", f"10.223.0.{i}/24", "dev", "eth0")
            _ip("-n", name, "link", "set", "eth0", "up")
        yield bridge, nodes
    finally:
        for name in reversed(made):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)


def _stop_all(started: Sequence[contextlib.AbstractContextManager[Bed]]) -> None:
    with ThreadPoolExecutor(max(len(started), 1)) as pool:
        for future in [pool.submit(start.__exit__, None, None, None) for start in started]:
            future.result()


@contextlib.contextmanager
def multi_node_swarm(count: int) -> Iterator[Swarm]:
    """`count` engines started in parallel, joined in one swarm (node 1 its manager)."""
    with _namespaces(count) as (bridge, names), contextlib.ExitStack() as stack:
        topologies = [node_topology(i) for i in range(1, count + 1)]
        gpus = [tuple(gpu["uuid"] for gpu in topology["gpus"]) for topology in topologies]
        advertised = [(SIMULATOR, TRAINER), *gpus[1:]]
        settings = [
            {
                "TESTBED_GENERIC_RESOURCES": ",".join(f"NVIDIA-GPU={g}" for g in offered),
                "TESTBED_NETNS": netns,
                "TESTBED_NVIDIA_RUNTIME": "1",
                "TESTBED_SWARM_RESOURCE": SWARM_RESOURCE,
            }
            for netns, offered in zip(names, advertised, strict=True)
        ]
        starts = [started_bed(f"drgpu-n{i}-", **s) for i, s in enumerate(settings, 1)]
        with ThreadPoolExecutor(count) as pool:
            futures = [pool.submit(start.__enter__) for start in starts]
        started = [s for s, f in zip(starts, futures, strict=True) if f.exception() is None]
        stack.callback(_stop_all, started)  # in parallel too: each stop takes seconds
        beds = [future.result() for future in futures]
        manager, address = beds[0], "10.223.0.1"
        manager.docker(
            "swarm", "init", "--advertise-addr", address, "--listen-addr", f"{address}:2377",
            "--dispatcher-heartbeat", HEARTBEAT,
        )  # fmt: skip
        token = manager.docker("swarm", "join-token", "-q", "worker").stdout.strip()
        nodes = []
        for i, bed in enumerate(beds, 1):
            own = f"10.223.0.{i}"
            if i > 1:
                bed.docker(
                    "swarm", "join", "--token", token, "--advertise-addr", own,
                    "--listen-addr", f"{own}:2377", f"{address}:2377",
                )  # fmt: skip
            bed.set_topology(topologies[i - 1])
            node_id = bed.docker("info", "--format", "{{.Swarm.NodeID}}").stdout.strip()
            labels = ["--label-add", "Robomaker=true"]
            labels += ["--label-add", "Sagemaker=true"] if i == 1 else []
            manager.docker("node", "update", *labels, node_id)
            node = (replace(bed, swarm=i == 1), names[i - 1], f"n{i}", own, settings[i - 1])
            nodes.append(Node(*node, gpus[i - 1], advertised[i - 1], node_id))
        yield Swarm(tuple(nodes), bridge)
