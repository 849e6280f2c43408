"""Swarm from the command line: render and plan in swarm style, and swarm-setup."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from drgpu.core.swarm_node import TOOLKIT_LINE
from tests.cli.conftest import GTX1650, GTX_M40, M40
from tests.support.runners import run_main
from tests.unit.core.test_swarm_node import GOOD, RESOURCES


def test_the_docker_style_setting_picks_the_swarm_rendering(tmp_path: Path) -> None:
    env_file = tmp_path / "system.env"
    env_file.write_text(
        textwrap.dedent(
            """\
            DR_DOCKER_STYLE=swarm
            DR_SAGEMAKER_CUDA_DEVICES=0
            DR_ROBOMAKER_CUDA_DEVICES=1
            """
        )
    )
    output = tmp_path / "stack.yml"
    done = run_main("render", "--env-file", env_file, "--inventory", GTX_M40, "-o", output)
    assert done.code == 0
    assert output.read_text().startswith("# Written by drgpu for swarm stack deepracer-0")


def test_plan_in_swarm_mode_says_what_is_pinned_and_what_the_engine_chooses(
    tmp_path: Path,
) -> None:
    env_file = tmp_path / "system.env"
    env_file.write_text(
        "DR_DOCKER_STYLE=swarm\nDR_WORKERS=2\nDR_SAGEMAKER_CUDA_DEVICES=0\n"
        "DR_ROBOMAKER_CUDA_DEVICES=1\n"
    )
    args = ["plan", "--env-file", str(env_file), "--inventory", str(GTX_M40)]
    done = run_main(*args, "--json")
    assert done.code == 0
    document = json.loads(done.out)
    swarm = document["swarm"]["services"]
    assert swarm["sagemaker"]["pinned_by_slot"] == [[M40]]
    assert swarm["robomaker"]["pinned_by_slot"] == [[GTX1650], [GTX1650]]
    assert swarm["robomaker"]["engine_chooses"] is False
    assert not any(service["device_request"] for service in document["services"].values())

    (tmp_path / "run.env").write_text("DRGPU_SWARM_GPUS=generic\n")
    table = run_main(*args).out
    assert "the engine's choice: 1 NVIDIA-GPU generic resource(s) per task x 2 replicas" in table
    assert "pinned: NVIDIA_VISIBLE_DEVICES=<uuids> on this node" in table
    assert "device request" not in table


def test_the_cli_prints_json_and_exits_6_when_the_node_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no.sock")
    daemon_json = tmp_path / "daemon.json"
    daemon_json.write_text(json.dumps(GOOD.daemon_json))
    toolkit = tmp_path / "config.toml"
    toolkit.write_text(TOOLKIT_LINE + "\n")
    args = ["swarm-setup", "--json", "--inventory", str(GTX_M40)]
    captured = run_main(*args, "--daemon-json", daemon_json, "--toolkit-config", toolkit)
    assert captured.code == 6
    document = json.loads(captured.out)
    assert document["node_generic_resources"] == list(RESOURCES)
    assert [f["subject"] for f in document["findings"] if f["level"] == "fail"] == ["engine"]
    assert "not set up for Swarm GPUs" in captured.err
