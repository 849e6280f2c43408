"""The CLI on workers, `auto`, runs and sharing: what `plan` shows, and every bad input."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from drgpu.commands import preparation
from drgpu.core.inputs import Inputs
from drgpu.host.files import load_inventory, read_settings
from tests.plan_warnings import order_free_text
from tests.support.runners import Cli

REPO = Path(__file__).resolve().parents[2]
GTX_M40 = REPO / "tests" / "inventories" / "m40-first.json"  # 0: Tesla M40, 1: GTX 1650
M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"
GTX1650 = "GPU-3b1d9c52-7a4e-4f0b-8c6d-2e9f1a7b5c30"


def settings(tmp_path: Path, **values: str) -> Path:
    path = tmp_path / "system.env"
    path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    return path


def test_plan_shows_each_worker_and_why(cli: Cli, tmp_path: Path) -> None:
    env = settings(tmp_path, DR_ROBOMAKER_CUDA_DEVICES="0,1", DR_WORKERS="3")
    code, out, err = cli("plan", "--env-file", env, "--inventory", GTX_M40)
    assert code == 0
    # Both GPUs go to the workers: the trainer (its key unset) is on the CPU, and says so.
    assert order_free_text(err).startswith(
        "drgpu: warning: DR_SAGEMAKER_CUDA_DEVICES is not set and no GPU is free for the trainer"
    )
    assert len(order_free_text(err).splitlines()) == 1
    for text in ("robomaker-1", "robomaker-2", "robomaker-3", "not started: robomaker-1 ..."):
        assert text in out
    assert (
        "why robomaker-2: GPU 1 (NVIDIA GeForce GTX 1650): spread: worker 2 of 3,"
        " round-robin over GPUs 0, 1"
    ) in out.splitlines()


def test_plan_json_has_the_workers_the_sharing_and_the_explanations(
    cli: Cli, tmp_path: Path
) -> None:
    env = settings(
        tmp_path,
        DR_SAGEMAKER_CUDA_DEVICES="auto",
        DR_ROBOMAKER_CUDA_DEVICES="auto",
        DR_WORKERS="2",
        DRGPU_SHARING="timeslice",
    )
    code, out, err = cli("plan", "--env-file", env, "--inventory", GTX_M40, "--json")
    assert (code, err) == (0, "")
    document = json.loads(out)
    assert document["sharing"] == "timeslice"
    assert document["services"]["robomaker"]["replicas"] == 0
    assert document["services"]["robomaker-1"]["replicas"] == 1
    assert [gpu["uuid"] for gpu in document["services"]["sagemaker"]["gpus"]] == [M40]
    assert [gpu["uuid"] for gpu in document["services"]["robomaker-2"]["gpus"]] == [GTX1650]
    assert document["explanations"][0].startswith("trainer (auto): GPU 0 (Tesla M40 24GB)")


def test_render_of_mps_writes_the_daemon_and_its_clients(cli: Cli, tmp_path: Path) -> None:
    env = settings(
        tmp_path,
        DR_SAGEMAKER_CUDA_DEVICES="0",
        DR_ROBOMAKER_CUDA_DEVICES="0",
        DRGPU_SHARING="mps",
        DRGPU_MPS_ROBOMAKER_MEMORY="2G",
    )
    code, out, err = cli("render", "--env-file", env, "--inventory", GTX_M40)
    assert (code, order_free_text(err)) == (0, "")
    assert "  drgpu-mps:\n" in out
    assert "nvidia-cuda-mps-control -d" in out
    assert f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: {M40}=2G" in out
    assert "ipc: service:drgpu-mps" in out


@pytest.mark.parametrize(
    ("keys", "code", "says"),
    [
        ({"DRGPU_SHARING": "shared"}, 2, "is not one of exclusive, timeslice, mps"),
        ({"DRGPU_WORKER_PLACMENT": "pack"}, 2, "did you mean DRGPU_WORKER_PLACEMENT?"),
        ({"DRGPU_MPS_SAGEMAKER_THREADS": "0"}, 2, "not a whole percentage from 1 to 100"),
        ({"DRGPU_MPS_ROBOMAKER_THREADS": "150"}, 2, "not a whole percentage from 1 to 100"),
        ({"DRGPU_MPS_ROBOMAKER_MEMORY": "2T"}, 2, "not a memory size like 2G or 2048M"),
        ({"DR_SAGEMAKER_CUDA_DEVICES": "auto,1"}, 2, "'auto' cannot be combined"),
        (
            {"DR_SAGEMAKER_CUDA_DEVICES": "0,1", "DR_ROBOMAKER_CUDA_DEVICES": "auto"},
            3,
            "auto found no free GPU for the simulators",
        ),
    ],
)
def test_bad_sharing_input_is_one_line_with_its_exit_code(
    cli: Cli, tmp_path: Path, keys: dict[str, str], code: int, says: str
) -> None:
    result = cli("plan", "--env-file", settings(tmp_path, **keys), "--inventory", GTX_M40)
    assert result[0] == code, result[2]
    lines = result[2].splitlines()
    assert lines[0].startswith("drgpu: error: ") and says in lines[0]
    assert len(lines) <= 2 and "Traceback" not in result[2]
    assert result[1] == ""


def test_planning_against_this_host_says_when_other_runs_cannot_be_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("drgpu.host.nvml.read_inventory", lambda: load_inventory(GTX_M40))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    env = settings(tmp_path, DR_SAGEMAKER_CUDA_DEVICES="0")
    prepared = preparation.prepare_with(read_settings(Inputs(env)), Inputs(env), None)
    blind = prepared.plan.warnings[-1].message
    assert blind.startswith("cannot see what other runs hold (cannot reach")
    assert blind.endswith("planned as if none ran")


def test_planning_against_this_host_respects_other_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = [("running", {"drgpu.run_id": "other", "drgpu.gpus": M40})]
    monkeypatch.setattr("drgpu.host.nvml.read_inventory", lambda: load_inventory(GTX_M40))
    monkeypatch.setattr("drgpu.host.engine.drgpu_labels", lambda: held)
    monkeypatch.setattr("drgpu.commands.run_lock.locked", lambda *a, **k: contextlib.nullcontext())
    monkeypatch.setattr("drgpu.host.engine.project_containers", lambda project: [])
    env = settings(tmp_path, DR_SAGEMAKER_CUDA_DEVICES="auto")
    prepared = preparation.prepare_with(read_settings(Inputs(env)), Inputs(env), None)
    assert [d.uuid for d in prepared.plan.service("sagemaker").devices] == [GTX1650]
    with preparation.prepare_locked(read_settings(Inputs(env)), Inputs(env)) as locked:
        assert locked.plan == prepared.plan
