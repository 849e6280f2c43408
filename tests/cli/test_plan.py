"""`drgpu plan` from the command line: its table, its JSON, its warnings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import (
    GTX1650,
    GTX_M40,
    M40,
    REPO,
    Settings,
)
from tests.plan_warnings import messages, order_free, order_free_text
from tests.support.runners import Cli


def test_plan_prints_a_table_of_services_and_gpus(cli: Cli, settings: Settings) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1")
    result = cli("plan", "--env-file", env, "--inventory", GTX_M40)
    assert (result.code, order_free_text(result.err)) == (0, "")
    for text in ("deepracer-0", "sagemaker", "Tesla M40 24GB", "robomaker", "GTX 1650"):
        assert text in result.out
    assert "PCI bus order" in result.out


def test_a_piped_plan_keeps_to_columns(
    cli: Cli, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1")
    result = cli("plan", "--env-file", env, "--inventory", GTX_M40)
    assert result.code == 0
    assert max(map(len, result.out.splitlines())) <= 120


def test_plan_json_describes_every_service(cli: Cli, settings: Settings) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1")
    result = cli("plan", "--env-file", env, "--inventory", GTX_M40, "--json")
    assert (result.code, order_free_text(result.err)) == (0, "")
    document = json.loads(result.out)
    assert document["schema_version"] == 2
    assert document["project"] == "deepracer-0"
    assert order_free(messages(document)) == ()
    assert list(document["services"]) == ["sagemaker", "robomaker"]
    trainer = document["services"]["sagemaker"]
    assert trainer["role"] == "trainer"
    assert trainer["device_request"] is True
    assert [
        {key: gpu[key] for key in ("index", "uuid", "name", "pci_bus_id")}
        for gpu in trainer["gpus"]
    ] == [{"index": 0, "uuid": M40, "name": "Tesla M40 24GB", "pci_bus_id": "00000000:03:00.0"}]
    assert document["services"]["robomaker"]["gpus"][0]["uuid"] == GTX1650


def test_plan_warnings_go_to_stderr_and_into_the_json(cli: Cli, settings: Settings) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="1", DR_ROBOMAKER_CUDA_DEVICES="0")
    result = cli("plan", "--env-file", env, "--inventory", GTX_M40, "--json")
    assert result.code == 0
    document = json.loads(result.out)
    assert len(messages(document)) == 2  # CUDA's order differs on this box, and memory
    assert result.err == "".join(f"drgpu: warning: {w}\n" for w in messages(document))
    assert "under 8 GiB" in result.err


def test_a_refused_plan_json_gives_every_problem_as_a_finding(cli: Cli, settings: Settings) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="7", DR_ROBOMAKER_CUDA_DEVICES="9")
    result = cli("plan", "--env-file", env, "--inventory", GTX_M40, "--json")
    document = json.loads(result.out)
    assert (result.code, document["ok"]) == (3, False)
    problems = [(f["kind"], f["level"], f["message"]) for f in document["findings"]]
    assert [(kind, level) for kind, level, _ in problems] == [("plan-problem", "fail")] * 2
    assert result.err.splitlines()[0] == "drgpu: error: " + "; ".join(m for *_, m in problems)
    assert "DR_SAGEMAKER_CUDA_DEVICES" in problems[0][2]
    assert all(f["fix"] for f in document["findings"])


def test_plan_table_warnings_go_to_stderr_only(cli: Cli, settings: Settings) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="1")
    result = cli("plan", "--env-file", env, "--inventory", GTX_M40)
    assert result.code == 0
    assert "drgpu: warning:" in result.err
    assert "warning" not in result.out


def test_plan_reads_a_users_compose_file(cli: Cli, settings: Settings, tmp_path: Path) -> None:
    compose = tmp_path / "training.yml"
    compose.write_text("services:\n  rl_coach: {image: coach}\n  robomaker: {image: sim}\n")
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1")
    result = cli("plan", "--env-file", env, "--inventory", GTX_M40, "-f", compose, "--json")
    assert result.code == 0
    rl_coach = json.loads(result.out)["services"]["rl_coach"]
    assert rl_coach["environment"]["CUDA_VISIBLE_DEVICES"] == M40
    assert rl_coach["device_request"] is False


def test_plan_of_the_example_settings(cli: Cli) -> None:
    result = cli("plan", "--env-file", REPO / "system.env.example", "--inventory", GTX_M40)
    assert result.code == 0


def test_a_secret_a_later_line_replaced_is_never_printed(cli: Cli, settings: Settings) -> None:
    """run.env repeats system.env's secret under another key, then sets the secret anew:
    the error quotes neither value."""
    env = settings(DR_LOCAL_SECRET_ACCESS_KEY="wJalrXUtnFEMIsecretvalue99")
    run_env = env.with_name("run.env")
    run_env.write_text(
        "DR_SAGEMAKER_CUDA_DEVICES=$DR_LOCAL_SECRET_ACCESS_KEY\nDR_LOCAL_SECRET_ACCESS_KEY=hunter2x\n"
    )
    result = cli("plan", "--env-file", env, "--run-env", run_env, "--inventory", GTX_M40)
    assert result.code == 2
    assert "DR_SAGEMAKER_CUDA_DEVICES: '****' is not a device" in result.err
    assert "secretvalue" not in result.out + result.err and "hunter2x" not in result.err
