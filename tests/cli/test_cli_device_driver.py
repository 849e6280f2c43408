"""DRGPU_DEVICE_DRIVER from the command line: `plan` says the driver and why, `render`
writes CDI device requests, and a value drgpu does not know is exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.cli.conftest import GTX_M40, M40, REPO, assert_one_error_line
from tests.support.runners import Cli


def settings(tmp_path: Path, driver: str) -> Path:
    env = tmp_path / "system.env"
    text = (REPO / "system.env.example").read_text()
    # GTX_M40 (tests/inventories/m40-first.json): 0 is the Tesla M40, 1 the GTX 1650
    devices = "DR_SAGEMAKER_CUDA_DEVICES=0\nDR_ROBOMAKER_CUDA_DEVICES=1\n"
    env.write_text(f"{text}\n{devices}DRGPU_DEVICE_DRIVER={driver}\n")
    return env


def test_cdi_is_planned_said_and_rendered(cli: Cli, tmp_path: Path) -> None:
    env = settings(tmp_path, "cdi")
    planned = cli("plan", "--env-file", env, "--inventory", GTX_M40, "--json")
    assert planned.code == 0, planned.err
    document = json.loads(planned.out)
    assert document["device_driver"] == "cdi"
    assert "device requests: driver cdi (DRGPU_DEVICE_DRIVER=cdi)" in document["explanations"]
    rendered = cli("render", "--env-file", env, "--inventory", GTX_M40)
    assert rendered.code == 0, rendered.err
    override = yaml.load(rendered.out.split("---\n")[-1], Loader=yaml.BaseLoader)
    trainer = override["services"]["sagemaker"]
    [request] = trainer["deploy"]["resources"]["reservations"]["devices"]
    assert (request["driver"], request["device_ids"]) == ("cdi", [f"nvidia.com/gpu={M40}"])
    assert trainer["labels"]["drgpu.gpus"] == M40


def test_auto_on_another_machines_inventory_is_the_toolkits_driver(
    cli: Cli, tmp_path: Path
) -> None:
    """With --inventory no engine is asked: auto names `nvidia`, and says nothing."""
    planned = cli(
        "plan", "--env-file", settings(tmp_path, "auto"), "--inventory", GTX_M40, "--json"
    )
    document = json.loads(planned.out)
    assert document["device_driver"] == "nvidia"
    assert not [line for line in document["explanations"] if "device requests" in line]


def test_an_unknown_driver_is_exit_2(cli: Cli, tmp_path: Path) -> None:
    result = cli("plan", "--env-file", settings(tmp_path, "docker"), "--inventory", GTX_M40)
    assert result.code == 2
    line = assert_one_error_line(result)
    assert "DRGPU_DEVICE_DRIVER: 'docker' is not one of auto, nvidia, cdi" in line
