"""The CLI on a stack that is not DeepRacer: roles from its compose file, GPUs per service."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.plan_warnings import order_free_text
from tests.support.runners import Cli

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "learner-carla"
MIXED_BOX = REPO / "examples" / "inventories" / "gtx1650-rtx3090-m40.json"
GTX1650 = "GPU-1650beef-2c3d-4e5f-8a9b-0c1d2e3f4a5b"
RTX3090 = "GPU-3090c0de-5a1b-4c2d-9e3f-a4b5c6d7e8f9"
M40 = "GPU-40e7a5c1-9d2b-4f6a-8c3e-1b2d3f4a5c6e"
EXAMPLE_ARGS = (
    "--env-file",
    str(EXAMPLE / "system.env"),
    "-f",
    str(EXAMPLE / "docker-compose.yml"),
    "--inventory",
    str(MIXED_BOX),
)


def test_plan_json_of_the_example_gives_each_service_exactly_its_gpu(cli: Cli) -> None:
    code, out, err = cli("plan", "--json", *EXAMPLE_ARGS)
    assert (code, order_free_text(err)) == (0, "")
    services = json.loads(out)["services"]
    assert {name: [gpu["uuid"] for gpu in s["gpus"]] for name, s in services.items()} == {
        "learner": [M40],
        "carla": [GTX1650],
        "evaluator": [RTX3090],
        "redis": [],
    }
    assert [services[name]["role"] for name in services] == [
        "trainer",
        "simulator",
        "other",
        "other",
    ]
    assert services["evaluator"]["device_request"] is True
    assert services["redis"]["environment"] == {"NVIDIA_VISIBLE_DEVICES": "void"}


def test_the_docs_show_the_examples_plan_as_it_is(cli: Cli) -> None:
    code, out, err = cli("plan", *EXAMPLE_ARGS)
    assert (code, order_free_text(err)) == (0, "")
    page = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")
    command = re.search(r"```\n(drgpu plan --env-file examples/learner-carla/[^`]*?)```", page)
    assert command is not None, "docs/settings.md's section on examples/learner-carla is missing"
    shown = [line.strip() for line in command[1].splitlines()]
    for line in out.splitlines():
        assert line.strip() in shown, line


def test_render_of_the_example_requests_each_gpu_by_uuid(cli: Cli) -> None:
    code, out, _ = cli("render", *EXAMPLE_ARGS)
    assert code == 0
    assert out.count("device_ids:") == 3
    for uuid in (M40, GTX1650, RTX3090):
        assert f"            - {uuid}\n" in out


STACK = """\
services:
  learner:
    labels: {drgpu.role: trainer}
  carla:
    x-drgpu: {role: simulator}
  evaluator: {}
  redis: {}
"""
BAD = {
    "unknown role value": (
        "services:\n  learner:\n    labels: [drgpu.role=learner]\n",
        "DRGPU_TRAINER_DEVICES=2\n",
        "drgpu.role label 'learner' is not one of trainer, simulator or none",
    ),
    "label and extension field disagree": (
        "services:\n  carla:\n    labels: {drgpu.role: trainer}\n    x-drgpu: {role: simulator}\n",
        "",
        "service carla has two roles",
    ),
    "the two keys of one role disagree": (
        STACK,
        "DR_SAGEMAKER_CUDA_DEVICES=1\nDRGPU_TRAINER_DEVICES=2\n",
        "system.env:2: DRGPU_TRAINER_DEVICES: '2' differs from DR_SAGEMAKER_CUDA_DEVICES='1'",
    ),
    "a service key naming no service": (
        STACK,
        "DRGPU_DEVICES_EVALUATER=1\n",
        "system.env:1) names no service of the stack; did you mean DRGPU_DEVICES_EVALUATOR?",
    ),
    "a service key for the trainer": (
        STACK,
        "DRGPU_DEVICES_LEARNER=1\n",
        "service learner would have two roles: it is the trainer",
    ),
}


@pytest.mark.parametrize("command", ["plan", "render", "up"])
@pytest.mark.parametrize("case", BAD.values(), ids=BAD.keys())
def test_bad_roles_and_keys_exit_2_with_one_line(
    cli: Cli, tmp_path: Path, command: str, case: tuple[str, str, str]
) -> None:
    stack, env, says = case
    (tmp_path / "stack.yml").write_text(stack)
    (tmp_path / "system.env").write_text(env)
    inventory = ("--inventory", MIXED_BOX) if command != "up" else ()
    code, out, err = cli(command, "-f", "stack.yml", *inventory)
    lines = err.splitlines()
    assert code == 2, err
    assert out == ""
    assert lines[0].startswith("drgpu: error: ")
    assert says in lines[0]
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("  hint: "))
    assert "Traceback" not in err


def test_swarm_pins_a_service_with_gpus_of_its_own_as_the_trainer(cli: Cli) -> None:
    code, out, err = cli("render", "--swarm", *EXAMPLE_ARGS)
    assert code == 0, err
    evaluator = yaml.safe_load(out)["services"]["evaluator"]
    rtx3090 = "GPU-3090c0de-5a1b-4c2d-9e3f-a4b5c6d7e8f9"
    assert evaluator["environment"] == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": rtx3090,
        "NVIDIA_VISIBLE_DEVICES": rtx3090,
    }
    assert evaluator["labels"]["drgpu.gpus"] == rtx3090
    assert "generic_resources" not in str(evaluator)


def test_swarm_places_declared_roles_as_deepracers(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "system.env").write_text(
        "DRGPU_INDEX_ORDER=pci\nDRGPU_TRAINER_DEVICES=2\nDRGPU_SIMULATOR_DEVICES=0\n"
    )
    args = ("-f", EXAMPLE / "docker-compose.yml", "--inventory", MIXED_BOX)
    code, out, err = cli("render", "--swarm", *args)
    assert code == 0, err
    services = yaml.safe_load(out)["services"]
    constraints = {
        name: body.get("deploy", {}).get("placement", {}).get("constraints")
        for name, body in services.items()
    }
    assert constraints["learner"] == ["node.labels.Sagemaker == true"]
    assert constraints["carla"] == ["node.labels.Robomaker == true"]


def test_k8s_puts_a_service_with_gpus_of_its_own_on_its_gpus_product(cli: Cli) -> None:
    code, out, err = cli("render", "--k8s", *EXAMPLE_ARGS)
    assert code == 0, err
    deployments = {
        d["metadata"]["labels"]["app.kubernetes.io/name"]: d["spec"]["template"]["spec"]
        for d in yaml.safe_load_all(out)
        if d and d.get("kind") == "Deployment"
    }
    assert deployments["evaluator"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3090"
    }
    assert deployments["redis"].get("nodeSelector") is None
