"""The `swarm_bed` fixture: a second private engine, a one-node swarm on 127.0.0.1.

Its dockerd advertises the fake GPUs of tests/e2e/helpers.THREE_GPUS as Swarm generic
resources (`--node-generic-resource NVIDIA-GPU=<uuid>`, through scripts/testbed's
TESTBED_GENERIC_RESOURCES), and its node carries DeepRacer-for-cloud's labels
Sagemaker=true and Robomaker=true. The main `bed` never becomes a swarm manager.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Generator
from pathlib import Path

import pytest

from tests.conftest import (
    IMAGE,
    START_TIMEOUT_S,
    TESTBED,
    Bed,
    _compose_bin,
    _missing_tooling,
    _pynvml_py,
    _read_bed_env,
    _sigterm_as_interrupt,
    _stop,
    _unavailable,
)
from tests.e2e.helpers import THREE_GPUS

GPU_UUIDS = tuple(gpu["uuid"] for gpu in THREE_GPUS["gpus"])


def _free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def swarm_bed() -> Generator[Bed, None, None]:
    """A private engine that is a one-node swarm manager with three fake GPUs to hand out."""
    reason = _missing_tooling()
    if reason:
        _unavailable(reason)
    root = Path(tempfile.mkdtemp(prefix="drgpu-swarm-", dir="/tmp"))
    atexit.register(_stop, root)
    resources = ",".join(f"NVIDIA-GPU={uuid}" for uuid in GPU_UUIDS)
    with _sigterm_as_interrupt():
        try:
            proc = subprocess.run(
                [str(TESTBED), "start", str(root)],
                # Its own network namespace: Swarm's vxlan interfaces and ports never
                # meet another engine's.
                env={**os.environ, "TESTBED_GENERIC_RESOURCES": resources, "TESTBED_NETNS": "1"},
                capture_output=True,
                text=True,
                timeout=START_TIMEOUT_S,
                check=False,
            )
            if proc.returncode != 0:
                pytest.fail(f"scripts/testbed start failed:\n{proc.stderr[-4000:]}", pytrace=False)
            values = _read_bed_env(root)
            bed = Bed(
                dir=root,
                docker_host=values["BED_DOCKER_HOST"],
                docker_bin=Path(shutil.which("docker") or "docker"),
                compose_bin=_compose_bin() or Path("docker-compose"),
                image=IMAGE,
                nvml_lib_dir=Path(values["FAKE_NVML_LIB_DIR"]),
                topology_path=Path(values["FAKE_NVML_TOPOLOGY"]),
                records_dir=Path(values["DRGPU_BED_RECORDS"]),
                pynvml_py=_pynvml_py() or Path("pynvml.py"),
            )
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
            yield bed
        finally:
            _stop(root)
            atexit.unregister(_stop)
