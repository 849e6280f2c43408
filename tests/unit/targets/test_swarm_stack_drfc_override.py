"""drgpu's override of DeepRacer-for-cloud's swarm files: only what the docker CLI merges."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from drgpu.core.inputs import Inputs
from drgpu.core.model import HEADER_MARK
from drgpu.core.planning import make_plan
from drgpu.core.service_gpus import SwarmStack
from drgpu.core.swarm_node import GPU_KIND, SwarmLayout
from drgpu.host.files import load_inventory, load_stack, read_settings
from drgpu.targets.swarm_stack import render_swarm_override, swarm_services

REPO = Path(__file__).resolve().parents[3]
DOCKER = REPO / "tests" / "drfc" / "checkout" / "docker"
FILES = [
    DOCKER / name
    for name in (
        "docker-compose-training.yml",
        "docker-compose-training-swarm.yml",
        "docker-compose-keys.yml",
    )
]
# tests/inventories/m40-first.json in NVML (PCI) order: index 0 is the M40, 1 the GTX.
M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"
GTX = "GPU-3b1d9c52-7a4e-4f0b-8c6d-2e9f1a7b5c30"
GTX_M40 = REPO / "tests" / "inventories" / "m40-first.json"
HERE = SwarmLayout(node_id="node1")


def override(
    tmp_path: Path, settings: str, layout: SwarmLayout = HERE
) -> tuple[SwarmStack, dict[str, Any]]:
    env_file = tmp_path / "system.env"
    shutil.copyfile(REPO / "system.env.example", env_file)
    (tmp_path / "run.env").write_text(settings + "DR_DOCKER_STYLE=swarm\n")
    config = read_settings(Inputs(env_file))
    stack = load_stack(FILES)
    plan = make_plan(config, stack, load_inventory(GTX_M40))
    names = [service.name for service in stack.services]
    rendered = render_swarm_override(
        plan, swarm_services(plan, names, config.workers, layout), layout
    )
    document = yaml.safe_load(rendered.text)
    assert isinstance(document, dict)
    return rendered, document


def test_one_simulator_and_rl_coach_get_their_gpus_by_environment(tmp_path: Path) -> None:
    settings = "DR_SAGEMAKER_CUDA_DEVICES=0\nDR_ROBOMAKER_CUDA_DEVICES=1\n"
    rendered, document = override(tmp_path, settings)

    assert rendered.text.startswith(f"{HEADER_MARK} for swarm stack deepracer-0")
    assert document["version"] == "3.7"
    robomaker, coach = document["services"]["robomaker"], document["services"]["rl_coach"]
    assert robomaker["environment"]["NVIDIA_VISIBLE_DEVICES"] == GTX
    assert robomaker["environment"]["CUDA_VISIBLE_DEVICES"] == GTX
    assert robomaker["environment"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert robomaker["labels"]["drgpu.gpus"] == GTX
    # DRfC's files keep their node-label constraints; drgpu adds this node.
    assert robomaker["deploy"] == {"placement": {"constraints": ["node.id == node1"]}}
    assert coach["environment"]["CUDA_VISIBLE_DEVICES"] == M40  # forwarded to the trainer
    assert coach["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert coach["labels"]["drgpu.forwarded_gpus"] == M40
    # Only what the docker CLI's Compose file format 3 takes, and merges: no device
    # requests, gpus, runtime, extends, !reset or replicas.
    for body in document["services"].values():
        assert set(body) <= {"environment", "labels", "deploy"}
        assert set(body.get("deploy", {})) <= {"placement", "resources"}
    assert "!" not in rendered.text


def test_workers_are_drfcs_replicas_each_with_its_gpu_by_slot(tmp_path: Path) -> None:
    settings = "DR_WORKERS=3\nDR_SAGEMAKER_CUDA_DEVICES=\nDR_ROBOMAKER_CUDA_DEVICES=0,1\n"
    rendered, document = override(tmp_path, settings)

    robomaker = document["services"]["robomaker"]
    template = (
        f'{{{{if eq .Task.Slot "1"}}}}{M40}{{{{else if eq .Task.Slot "2"}}}}{GTX}'
        f'{{{{else if eq .Task.Slot "3"}}}}{M40}{{{{else}}}}void{{{{end}}}}'
    )
    assert robomaker["environment"]["NVIDIA_VISIBLE_DEVICES"] == template
    assert robomaker["environment"]["CUDA_VISIBLE_DEVICES"] == template
    assert "replicas" not in robomaker.get("deploy", {})  # DRfC's ${DR_WORKERS} stays
    (simulator,) = [s for s in rendered.services if s.name == "robomaker"]
    assert simulator.replicas == 3  # what verification waits for


def test_generic_simulators_reserve_and_fail_closed(tmp_path: Path) -> None:
    settings = "DR_WORKERS=2\nDR_SAGEMAKER_CUDA_DEVICES=\nDR_ROBOMAKER_CUDA_DEVICES=0,1\n"
    _, document = override(tmp_path, settings, SwarmLayout(pin_simulators=False, node_id="n1"))

    robomaker = document["services"]["robomaker"]
    assert robomaker["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"
    generic = robomaker["deploy"]["resources"]["reservations"]["generic_resources"]
    assert generic == [{"discrete_resource_spec": {"kind": GPU_KIND, "value": 1}}]
    assert "placement" not in robomaker["deploy"]
