"""The `swarm_bed` fixture: a second private engine, a one-node swarm on 127.0.0.1.

Its dockerd advertises the fake GPUs of tests/e2e/helpers.THREE_GPUS as Swarm generic
resources (`--node-generic-resource NVIDIA-GPU=<uuid>`, through scripts/testbed's
TESTBED_GENERIC_RESOURCES), its default runtime is the stub NVIDIA runtime (every
container runs the stub hook, which records what it exposed; the Swarm variable
DOCKER_RESOURCE_NVIDIA-GPU wins over NVIDIA_VISIBLE_DEVICES, as `swarm-resource` makes
the real one do), and its node carries DeepRacer-for-cloud's labels Sagemaker=true and
Robomaker=true. The main `bed` never becomes a swarm manager.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
from collections.abc import Generator, Iterator

import pytest

from tests.conftest import Bed, started_bed
from tests.e2e.helpers import SIMULATOR, THREE_GPUS, TRAINER
from tests.support.swarm_nodes import Swarm, multi_node_swarm

GPU_UUIDS = tuple(gpu["uuid"] for gpu in THREE_GPUS["gpus"])


def _free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def swarm_bed() -> Generator[Bed, None, None]:
    """A private engine that is a one-node swarm manager with three fake GPUs to hand out."""
    with _swarm(GPU_UUIDS) as bed:
        yield bed


@pytest.fixture(scope="module")
def simulator_swarm_bed() -> Generator[Bed, None, None]:
    """A one-node swarm that advertises only the GPUs `drgpu swarm-setup` leaves to the
    simulators when the trainer has the L4 (NVML index 2): the GTX 1650 and the M40."""
    with _swarm((SIMULATOR, TRAINER)) as bed:
        yield bed


@contextlib.contextmanager
def _swarm(uuids: tuple[str, ...]) -> Iterator[Bed]:
    resources = ",".join(f"NVIDIA-GPU={uuid}" for uuid in uuids)
    # Its own network namespace: Swarm's vxlan interfaces and ports never meet another
    # engine's.
    with started_bed(
        "drgpu-swarm-",
        TESTBED_GENERIC_RESOURCES=resources,
        TESTBED_NETNS="1",
        TESTBED_NVIDIA_RUNTIME="1",
        TESTBED_SWARM_RESOURCE="DOCKER_RESOURCE_NVIDIA-GPU",
    ) as bed:
        # Every swarm port on the loopback address only.
        bed.docker(
            "swarm",
            "init",
            "--advertise-addr",
            "127.0.0.1",
            "--listen-addr",
            f"127.0.0.1:{_free_loopback_port()}",
            "--data-path-addr",
            "127.0.0.1",
        )
        node = bed.docker("info", "--format", "{{.Swarm.NodeID}}").stdout.strip()
        labels = ("--label-add", "Sagemaker=true", "--label-add", "Robomaker=true")
        bed.docker("node", "update", *labels, node)
        bed.set_topology(THREE_GPUS)
        yield dataclasses.replace(bed, swarm=True)


@pytest.fixture(scope="module")
def two_node_swarm() -> Generator[Swarm, None, None]:
    """A manager and one worker node, each with GPUs of its own (tests/support/swarm_nodes)."""
    with multi_node_swarm(2) as swarm:
        yield swarm


@pytest.fixture(scope="module")
def three_node_swarm() -> Generator[Swarm, None, None]:
    """A manager and two worker nodes, each with GPUs of its own."""
    with multi_node_swarm(3) as swarm:
        yield swarm
