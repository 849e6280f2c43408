"""`drgpu status` on the bed when NVML cannot list a GPU's processes: the GPU's processes
are unknown, said, and never read as "no process"; a warning, not exit 6. A simulator
killed while `status --watch` runs is a violation of the refresh after, with its status."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import (
    SIMULATOR,
    THREE_GPUS,
    TRAINER,
    container_of,
    service,
    write_env,
    write_stack,
)
from tests.support.runners import read_until, run_drgpu, start_drgpu

pytestmark = pytest.mark.docker

RUN_ID = "unlisted"
PROJECT = f"deepracer-{RUN_ID}"
SIMULATOR_INDEX, TRAINER_INDEX = 0, 1  # NVML indices in THREE_GPUS (PCI order)


@pytest.fixture(scope="module")
def stack(bed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp = tmp_path_factory.mktemp("warnings")
    bed.set_topology(THREE_GPUS)
    compose = write_stack(tmp, {"sagemaker": service(bed), "robomaker": service(bed)})
    env_file = write_env(tmp, RUN_ID, trainer="1", simulator="0")
    try:
        started = run_drgpu("up", "--env-file", str(env_file), "-f", str(compose), env=bed.env())
        assert started.returncode == 0, started.stderr
        yield env_file
    finally:
        bed.cleanup_project(PROJECT)


def test_a_gpu_whose_processes_nvml_cannot_list_is_a_warning(bed: Any, stack: Path) -> None:
    trainer_pid = container_of(bed, PROJECT, "sagemaker")["State"]["Pid"]
    topology = copy.deepcopy(THREE_GPUS)
    for gpu in topology["gpus"]:
        if gpu["uuid"] == TRAINER:
            gpu["processes"] = [{"pid": trainer_pid, "used_memory_mib": 256}]
        if gpu["uuid"] == SIMULATOR:  # inside a container that lost its nodes: Unknown Error
            gpu["process_query_error"] = "unknown"
    bed.set_topology(topology)

    done = run_drgpu("status", "--json", "--run-id", RUN_ID, env=bed.env())

    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    [warning] = document["findings"]
    assert document["ok"] is False and warning["level"] == "warn"
    assert (warning["kind"], warning["gpu_index"]) == ("processes-unknown", SIMULATOR_INDEX)
    assert "status cannot list processes on GPU 0" in warning["message"]
    known = {gpu["index"]: gpu["processes_known"] for gpu in document["gpus"]}
    assert (known[SIMULATOR_INDEX], known[TRAINER_INDEX]) == (False, True)
    [process] = document["processes"]
    assert (process["pid"], process["verdict"]) == (trainer_pid, "ok")

    table = run_drgpu("status", "--run-id", RUN_ID, env={**bed.env(), "COLUMNS": "200"})
    assert table.returncode == 0, table.stderr
    assert "WARNING: status cannot list processes on GPU 0" in table.stdout


def test_a_simulator_killed_under_a_watch_is_a_violation(bed: Any, stack: Path) -> None:
    bed.set_topology(THREE_GPUS)
    flags = ("--json", "--run-id", RUN_ID, "--interval", "1", "--count", "3")
    with start_drgpu("status", "--watch", *flags, env=bed.env()) as watching:
        first = read_until(watching.stdout, "\n")  # the first refresh, before the kill
        bed.docker("kill", container_of(bed, PROJECT, "robomaker")["Id"])
        rest, _ = watching.communicate(timeout=60)
    frames = [json.loads(line) for line in (first + rest).splitlines()]
    assert frames[0]["ok"] is True and watching.returncode == 6
    [stopped] = frames[-1]["findings"]
    assert (stopped["kind"], stopped["level"], stopped["service"]) == (
        "service-stopped",
        "fail",
        "robomaker",
    )
    assert stopped["message"].endswith("exited with status 137")  # read again once stopped
