"""Several runs on one host end to end: concurrent `drgpu up`, `auto`, and `down` of one run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NewRun
from tests.e2e.helpers import (
    SIMULATOR,
    SPARE,
    THREE_GPUS,
    TRAINER,
    container_of,
    containers,
    nvml_inside,
    service,
    write_stack,
)
from tests.support.runners import run_drgpu, start_drgpu

pytestmark = pytest.mark.docker


def settings(directory: Path, run_id: str, **keys: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "system.env"
    path.write_text(
        f"DR_RUN_ID={run_id}\n" + "".join(f"{key}={value}\n" for key, value in keys.items())
    )
    return path


def trainer_gpu(bed: Any, run_id: str) -> str:
    """The one GPU the trainer of a run sees through NVML."""
    [[index, uuid]] = nvml_inside(bed, container_of(bed, f"deepracer-{run_id}", "sagemaker"))
    assert index == 0
    return str(uuid)


def test_concurrent_auto_runs_never_share_a_gpu_and_down_leaves_the_others(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    bed.set_topology(THREE_GPUS)
    stack = write_stack(tmp_path, {"sagemaker": service(bed)})
    runs = [new_run(name) for name in ("a", "b", "c")]
    env_files = [
        settings(tmp_path / run_id, run_id, DR_SAGEMAKER_CUDA_DEVICES="auto") for run_id in runs
    ]

    processes = [
        start_drgpu("up", "--env-file", str(env), "-f", str(stack), env=bed.env())
        for env in env_files
    ]
    results = [process.communicate(timeout=300) for process in processes]

    assert [p.returncode for p in processes] == [0, 0, 0], [err for _, err in results]
    held = {run_id: trainer_gpu(bed, run_id) for run_id in runs}
    assert sorted(held.values()) == sorted([TRAINER, SIMULATOR, SPARE])

    late = new_run("d")
    refused = run_drgpu(
        "up",
        "--env-file",
        str(settings(tmp_path / late, late, DR_SAGEMAKER_CUDA_DEVICES="auto")),
        "-f",
        str(stack),
        env=bed.env(),
    )
    assert refused.returncode == 3
    assert "auto found no free GPU for the trainer" in refused.stderr
    assert containers(bed, f"deepracer-{late}") == []

    stopped = run_drgpu("down", "--env-file", str(env_files[0]), "-f", str(stack), env=bed.env())

    assert stopped.returncode == 0, stopped.stderr
    assert containers(bed, f"deepracer-{runs[0]}") == []
    for run_id in runs[1:]:
        [container] = containers(bed, f"deepracer-{run_id}")
        assert container["State"]["Running"]
        assert trainer_gpu(bed, run_id) == held[run_id]
    retried = run_drgpu(
        "up", "--env-file", str(tmp_path / late / "system.env"), "-f", str(stack), env=bed.env()
    )
    assert retried.returncode == 0, retried.stderr
    assert trainer_gpu(bed, late) == held[runs[0]]


def test_two_runs_asking_for_one_gpu_at_once_get_it_once(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    bed.set_topology(THREE_GPUS)
    stack = write_stack(tmp_path, {"sagemaker": service(bed)})
    runs = [new_run("a"), new_run("b")]
    processes = [
        start_drgpu(
            "up",
            "--env-file",
            str(settings(tmp_path / run_id, run_id, DR_SAGEMAKER_CUDA_DEVICES="1")),
            "-f",
            str(stack),
            env=bed.env(),
        )
        for run_id in runs
    ]
    results = [process.communicate(timeout=300) for process in processes]

    codes = sorted(process.returncode for process in processes)
    assert codes == [0, 3], [err for _, err in results]
    winner = runs[[p.returncode for p in processes].index(0)]
    loser = runs[[p.returncode for p in processes].index(3)]
    error = results[runs.index(loser)][1]
    assert f"is held by run '{winner}' (sagemaker)" in error
    assert "Traceback" not in error
    assert trainer_gpu(bed, winner) == TRAINER
    assert containers(bed, f"deepracer-{loser}") == []


def test_auto_on_a_mixed_box_avoids_busy_gpus_and_explains_why(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    # The biggest GPU runs a foreign process: the trainer gets the next biggest,
    # the simulator the rest.
    topology = {
        "gpus": [
            {**THREE_GPUS["gpus"][0], "processes": [{"pid": 999, "used_memory_mib": 300}]},
            *THREE_GPUS["gpus"][1:],
        ]
    }
    bed.set_topology(topology)
    stack = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": service(bed)})
    env_file = settings(
        tmp_path, project, DR_SAGEMAKER_CUDA_DEVICES="auto", DR_ROBOMAKER_CUDA_DEVICES="auto"
    )

    planned = run_drgpu("plan", "--env-file", str(env_file), "-f", str(stack), env=bed.env())
    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())

    assert started.returncode == 0, started.stderr
    assert trainer_gpu(bed, project) == TRAINER  # Tesla M40, 22912 MiB (the L4 is busy)
    simulator = container_of(bed, f"deepracer-{project}", "robomaker")
    assert nvml_inside(bed, simulator) == [[0, SIMULATOR]]
    assert planned.returncode == 0, planned.stderr
    assert "trainer (auto): GPU 1 (Tesla M40 24GB): the free GPU with the most memory" in (
        planned.stdout
    )
    assert "passed over GPU 2 (1 foreign process(es))" in planned.stdout


MIXED = {
    "gpus": [
        {
            "uuid": "GPU-aaaaaaaa-0000-4000-8000-000000000001",
            "name": "T4",
            "pci_bus_id": "01:00.0",
            "memory_total_mib": 16384,
            "compute_capability": [7, 5],
        },
        {
            "uuid": "GPU-aaaaaaaa-0000-4000-8000-000000000002",
            "name": "A4000",
            "pci_bus_id": "02:00.0",
            "memory_total_mib": 16384,
            "compute_capability": [8, 6],
        },
        {
            "uuid": "GPU-aaaaaaaa-0000-4000-8000-000000000003",
            "name": "A100",
            "pci_bus_id": "03:00.0",
            "memory_total_mib": 40960,
            "compute_capability": [8, 0],
            "mig_mode": True,
            "mig_devices": [
                {"uuid": "MIG-aaaaaaaa-0000-4000-8000-0000000000a1", "memory_total_mib": 19968}
            ],
        },
        {
            "uuid": "GPU-aaaaaaaa-0000-4000-8000-000000000004",
            "name": "P4",
            "pci_bus_id": "04:00.0",
            "memory_total_mib": 8192,
            "compute_capability": [6, 1],
        },
    ]
}


def planned_gpus(bed: Any, env_file: Path, stack: Path) -> dict[str, list[str]]:
    done = run_drgpu("plan", "--env-file", str(env_file), "-f", str(stack), "--json", env=bed.env())
    assert done.returncode == 0, done.stderr
    services = json.loads(done.stdout)["services"]
    return {name: [gpu["name"] for gpu in body["gpus"]] for name, body in services.items()}


def test_auto_on_a_mixed_box_breaks_ties_by_compute_and_skips_mig_and_held_gpus(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    bed.set_topology(MIXED)
    stack = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": service(bed)})
    auto = {"DR_SAGEMAKER_CUDA_DEVICES": "auto", "DR_ROBOMAKER_CUDA_DEVICES": "auto"}
    first = new_run("a")
    env_file = settings(tmp_path / first, first, DR_WORKERS="2", **auto)

    # Equal memory: the higher compute capability; the MIG-mode A100 is never taken whole.
    assert planned_gpus(bed, env_file, stack) == {
        "sagemaker": ["A4000"],
        "robomaker": [],
        "robomaker-1": ["T4"],
        "robomaker-2": ["P4"],
    }
    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())
    assert started.returncode == 0, started.stderr

    # A second run plans around what the first one holds: nothing is left for it.
    second = new_run("b")
    refused = run_drgpu(
        "up",
        "--env-file",
        str(settings(tmp_path / second, second, **auto)),
        "-f",
        str(stack),
        env=bed.env(),
    )
    assert refused.returncode == 3
    assert "GPU 1 (held by run" in refused.stderr and "GPU 2 (in MIG mode" in refused.stderr


def test_a_trainer_whose_key_is_unset_gets_a_gpu_no_other_run_holds(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    bed.set_topology(THREE_GPUS)
    stack = write_stack(tmp_path, {"sagemaker": service(bed)})
    first, second = new_run("a"), new_run("b")
    settled = [settings(tmp_path / run_id, run_id) for run_id in (first, second)]

    for env in settled:
        started = run_drgpu("up", "--env-file", str(env), "-f", str(stack), env=bed.env())
        assert started.returncode == 0, started.stderr
        assert "DR_SAGEMAKER_CUDA_DEVICES is not set: the trainer gets GPU" in started.stderr

    assert trainer_gpu(bed, first) != trainer_gpu(bed, second)
