"""`drgpu gpus` and `drgpu status` end to end: a stack on the private engine, and fake GPUs
whose processes are the real host PIDs of its containers."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import (
    SIMULATOR,
    SPARE,
    THREE_GPUS,
    TRAINER,
    container_of,
    service,
    write_env,
    write_stack,
)
from tests.support.runners import run_drgpu, start_drgpu

pytestmark = pytest.mark.docker

RUN_ID = "watched"
PROJECT = f"deepracer-{RUN_ID}"
# NVML indices of THREE_GPUS: 0 is the simulator's GPU, 1 the trainer's, 2 the spare.
INDEX = {SIMULATOR: 0, TRAINER: 1, SPARE: 2}
FROM_STDIN = ("--inventory", "/dev/stdin", "--json")
THREE_QUICK_REFRESHES = ("--interval", "0.3", "--count", "3")


@dataclass(frozen=True)
class Stack:
    """A started stack: its settings file and the host PID of each service's container."""

    env_file: Path
    trainer_pid: int
    simulator_pid: int


@pytest.fixture(scope="module")
def stack(bed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("status")
    bed.set_topology(THREE_GPUS)
    compose = write_stack(tmp, {"sagemaker": service(bed), "robomaker": service(bed)})
    env_file = write_env(tmp, RUN_ID, trainer="1", simulator="0")
    try:
        started = run_drgpu("up", "--env-file", str(env_file), "-f", str(compose), env=bed.env())
        assert started.returncode == 0, started.stderr
        yield Stack(
            env_file=env_file,
            trainer_pid=container_of(bed, PROJECT, "sagemaker")["State"]["Pid"],
            simulator_pid=container_of(bed, PROJECT, "robomaker")["State"]["Pid"],
        )
    finally:
        bed.cleanup_project(PROJECT)


def topology(
    processes: dict[str, list[int]] | None = None,
    graphics: dict[str, list[int]] | None = None,
    lost: tuple[str, ...] = (),
) -> dict[str, Any]:
    """THREE_GPUS with these PIDs on these GPUs (by UUID), and these GPUs lost."""
    data = copy.deepcopy(THREE_GPUS)
    for gpu in data["gpus"]:
        gpu["processes"] = [
            {"pid": pid, "used_memory_mib": 256} for pid in (processes or {}).get(gpu["uuid"], [])
        ]
        gpu["graphics_processes"] = [
            {"pid": pid, "used_memory_mib": 64} for pid in (graphics or {}).get(gpu["uuid"], [])
        ]
        if gpu["uuid"] in lost:
            gpu["error"] = "gpu_is_lost"
    return data


def json_of(done: subprocess.CompletedProcess[str]) -> Any:
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)


def by_pid_and_gpu(document: dict[str, Any]) -> dict[tuple[int, int], dict[str, Any]]:
    return {(p["pid"], p["gpu_index"]): p for p in document["processes"]}


def test_status_maps_gpu_processes_to_services_and_flags_violations(bed: Any, stack: Stack) -> None:
    me = os.getpid()  # a compute process on the host: it belongs to no stack
    bed.set_topology(
        topology(
            processes={TRAINER: [stack.trainer_pid], SPARE: [stack.simulator_pid, me]},
            graphics={SIMULATOR: [stack.simulator_pid]},
        )
    )

    done = run_drgpu("status", "--json", env=bed.env())

    assert done.returncode == 6, done.stderr
    document = json_of(done)
    processes = by_pid_and_gpu(document)
    trainer = processes[(stack.trainer_pid, INDEX[TRAINER])]
    assert (trainer["verdict"], trainer["run_id"], trainer["service"]) == (
        "ok",
        RUN_ID,
        "sagemaker",
    )
    assert trainer["container"] == f"{PROJECT}-sagemaker-1"
    rendering = processes[(stack.simulator_pid, INDEX[SIMULATOR])]
    assert (rendering["verdict"], rendering["service"], rendering["type"]) == (
        "ok",
        "robomaker",
        "G",
    )
    planted = processes[(stack.simulator_pid, INDEX[SPARE])]
    assert (planted["verdict"], planted["service"]) == ("wrong-gpu", "robomaker")
    assert processes[(me, INDEX[SPARE])]["verdict"] == "stray"
    assert sorted((v["kind"], v["pid"]) for v in document["findings"]) == sorted(
        [("wrong-gpu", stack.simulator_pid), ("stray", me)]
    )
    assert document["ok"] is False
    (run,) = document["runs"]
    assert run["services"]["sagemaker"][0]["gpus"] == [TRAINER]
    assert run["services"]["robomaker"][0]["processes"] == [
        {"pid": stack.simulator_pid, "gpu_index": INDEX[SIMULATOR], "verdict": "ok"},
        {"pid": stack.simulator_pid, "gpu_index": INDEX[SPARE], "verdict": "wrong-gpu"},
    ]
    # stdout holds the document, stderr one error line about the first violation.
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("drgpu: error: ")
    assert "(and 1 more violation)" in lines[0]

    table = run_drgpu("status", env=bed.env())

    assert table.returncode == 6
    for text in (" · robomaker pid ", "WRONG-GPU: given GPU 0", "STRAY: on the host"):
        assert text in table.stdout, table.stdout


def test_status_of_a_stack_on_its_own_gpus_exits_zero(bed: Any, stack: Stack) -> None:
    bed.set_topology(
        topology(processes={TRAINER: [stack.trainer_pid], SIMULATOR: [stack.simulator_pid]})
    )

    done = run_drgpu("status", "--run-id", RUN_ID, "--json", env=bed.env())

    assert done.returncode == 0, done.stderr
    document = json_of(done)
    assert document["ok"] is True
    assert {p["verdict"] for p in document["processes"]} == {"ok"}
    assert {p["service"] for p in document["processes"]} == {"sagemaker", "robomaker"}

    other = json_of(run_drgpu("status", "--run-id", "nothere", "--json", env=bed.env()))
    assert (other["runs"], other["processes"]) == ([], [])


def test_a_lost_gpu_is_marked_and_the_others_listed(bed: Any, stack: Stack) -> None:
    bed.set_topology(topology(processes={TRAINER: [stack.trainer_pid]}, lost=(SPARE,)))

    listed = run_drgpu("gpus", "--json", env=bed.env())
    table = run_drgpu("gpus", env=bed.env())
    status = run_drgpu("status", "--json", env=bed.env())

    assert listed.returncode == 0, listed.stderr
    assert json_of(listed)["schema_version"] == 1
    gpus = json_of(listed)["gpus"]
    assert [(g["index"], g["uuid"], g["error"]) for g in gpus] == [
        (0, SIMULATOR, None),
        (1, TRAINER, None),
        (2, "", "gpu_is_lost"),
    ]
    assert "LOST (gpu_is_lost)" in table.stdout
    assert "Tesla M40 24GB" in table.stdout
    assert status.returncode == 0, status.stderr
    document = json_of(status)
    assert [g["lost"] for g in document["gpus"]] == [False, False, True]
    assert document["notes"][0].startswith("GPU 2 is lost (gpu_is_lost)")
    assert by_pid_and_gpu(document)[(stack.trainer_pid, 1)]["verdict"] == "ok"

    # The trainer's own GPU lost: its service holds a GPU NVML no longer lists.
    bed.set_topology(topology(lost=(TRAINER,)))
    status = run_drgpu("status", "--json", env=bed.env())
    assert status.returncode == 6
    (violation,) = json_of(status)["findings"]
    assert violation["kind"] == "missing-gpu"
    assert "service sagemaker" in violation["message"]


def test_a_gpu_fault_is_a_violation_of_the_run_on_that_gpu(bed: Any, stack: Stack) -> None:
    faulty = topology(processes={TRAINER: [stack.trainer_pid]})
    gpu_of = {g["uuid"]: g for g in faulty["gpus"]}
    gpu_of[TRAINER] |= {"remap_pending": True, "ecc_uncorrected": 2}
    bed.set_topology(faulty)

    status = run_drgpu("status", "--json", env=bed.env())

    assert status.returncode == 6, status.stderr
    faults = [f for f in json_of(status)["findings"] if f["kind"] == "gpu-fault"]
    assert [(f["run_id"], f["service"], f["gpu_index"]) for f in faults] == [
        (RUN_ID, "sagemaker", INDEX[TRAINER])
    ] * 2
    assert "row remapping pending" in faults[1]["message"]

    # A watch also follows NVML's events: an Xid on the simulator's GPU.
    events = topology(processes={SIMULATOR: [stack.simulator_pid]})
    next(g for g in events["gpus"] if g["uuid"] == SIMULATOR)["events"] = [
        {"type": "xid", "xid": 79}
    ]
    bed.set_topology(events)
    watch = run_drgpu("status", "--watch", "--json", *THREE_QUICK_REFRESHES, env=bed.env())
    last = json.loads(watch.stdout.splitlines()[-1])
    (xid,) = [f for f in last["findings"] if f["kind"] == "gpu-fault"]
    assert xid["service"] == "robomaker" and "critical Xid 79 (fell off the bus)" in xid["message"]


def test_gpus_shows_which_run_and_service_holds_each_gpu(bed: Any, stack: Stack) -> None:
    bed.set_topology(topology())

    listed = run_drgpu("gpus", "--json", env=bed.env())
    table = run_drgpu("gpus", env=bed.env())

    assert listed.returncode == 0, listed.stderr
    held = {g["uuid"]: g["held_by"] for g in json_of(listed)["gpus"]}
    assert [(h["run_id"], h["service"]) for h in held[TRAINER]] == [(RUN_ID, "sagemaker")]
    assert [(h["run_id"], h["service"]) for h in held[SIMULATOR]] == [(RUN_ID, "robomaker")]
    assert held[SPARE] == []
    assert f"run {RUN_ID}: sagemaker" in table.stdout


def test_gpus_without_the_engine_says_so_once_and_shows_the_table(bed: Any, tmp_path: Path) -> None:
    bed.set_topology(topology())
    nowhere = f"unix://{tmp_path}/no-docker.sock"

    table = run_drgpu("gpus", env=bed.env(DOCKER_HOST=nowhere))
    listed = run_drgpu("gpus", "--json", env=bed.env(DOCKER_HOST=nowhere))

    assert (table.returncode, listed.returncode) == (0, 0)
    assert "Tesla M40 24GB" in table.stdout
    assert "Held by" not in table.stdout
    engine_lines = [line for line in table.stderr.splitlines() if "Docker engine" in line]
    assert len(engine_lines) == 1, table.stderr
    assert engine_lines[0].startswith("drgpu: warning: cannot reach the Docker engine")
    assert all(g["held_by"] is None for g in json_of(listed)["gpus"])


def test_gpus_json_plans_the_same_as_nvml(bed: Any, tmp_path: Path) -> None:
    bed.set_topology(topology(processes={TRAINER: [4242]}, graphics={SIMULATOR: [4243]}))
    # GPUs no running stack holds (the module's stack holds 0 and 1).
    env_file = write_env(tmp_path, "roundtrip", trainer="2", simulator="none")

    listed = run_drgpu("gpus", "--json", env=bed.env())
    direct = run_drgpu("plan", "--env-file", str(env_file), "--json", env=bed.env())
    piped = run_drgpu(
        "plan",
        "--env-file",
        str(env_file),
        *FROM_STDIN,
        input=listed.stdout,
        env=bed.env(LD_LIBRARY_PATH=str(tmp_path)),  # no NVML at all on this side
        timeout=120,
    )

    assert listed.returncode == 0, listed.stderr
    assert direct.returncode == 0, direct.stderr
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout) == json.loads(direct.stdout)
    gpus = json_of(listed)["gpus"]
    assert gpus[1]["processes"] == [{"pid": 4242, "used_memory_mib": 256}]
    assert gpus[0]["graphics_processes"] == [{"pid": 4243, "used_memory_mib": 64}]


def test_watch_keeps_one_nvml_session(bed: Any, stack: Stack) -> None:
    # The fake reads its topology when NVML is initialised: a watch that initialised
    # NVML again on every refresh would see the change made after its first line.
    bed.set_topology(topology(processes={TRAINER: [stack.trainer_pid]}))
    watch = start_drgpu("status", "--watch", "--json", *THREE_QUICK_REFRESHES, env=bed.env())
    try:
        assert watch.stdout is not None
        first = json.loads(watch.stdout.readline())
        bed.set_topology(topology(processes={SPARE: [stack.trainer_pid]}))
        rest, errors = watch.communicate(timeout=120)
    finally:
        watch.kill()
    later = [json.loads(line) for line in rest.splitlines()]

    assert watch.returncode == 0, errors
    assert len(later) == 2
    assert [d["processes"] for d in later] == [first["processes"]] * 2
    assert [p["gpu_index"] for p in first["processes"]] == [1]
    fresh = json_of(run_drgpu("status", "--json", env=bed.env()))
    assert [(p["gpu_index"], p["verdict"]) for p in fresh["processes"]] == [(2, "wrong-gpu")]


def test_watch_off_a_terminal_prints_plain_lines_and_ends_after_count(
    bed: Any, stack: Stack
) -> None:
    bed.set_topology(topology(processes={TRAINER: [stack.trainer_pid]}))

    done = run_drgpu("status", "--watch", "--count", "2", "--interval", "0.1", env=bed.env())

    assert done.returncode == 0, done.stderr
    lines = [line.split(" ", 1)[1] for line in done.stdout.splitlines()]  # no time stamp
    assert lines.count("0 violation(s)") == 2
    assert f"  - run {RUN_ID} · trainer · sagemaker pid {stack.trainer_pid} 256 MiB" in lines
    assert "\x1b" not in done.stdout  # no terminal control codes
