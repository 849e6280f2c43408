"""Kubernetes manifests: golden files, schema validation (offline), GPUs and sharing."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes_validate
import pytest
import yaml

from drgpu.core.compose_stack import base_stack_file, load_stack
from drgpu.core.planning import make_plan
from drgpu.core.settings import load_config
from drgpu.core.topology import load_inventory
from drgpu.host.compose import resolve_stack
from drgpu.targets.kubernetes import (
    GPU_RESOURCE,
    PRODUCT_LABEL,
    SHARING_CONFIG_MAP,
    Manifests,
    render_manifests,
)

REPO = Path(__file__).resolve().parents[2]
INVENTORIES = REPO / "examples" / "inventories"
DRFC_TRAINING = REPO / "tests" / "golden" / "stacks" / "drfc-training.yml"
A100_MIG_1 = "MIG-a1000000-0000-4000-8000-0000000000a1"
# scenario: (run.env, inventory, compose file or None for drgpu's base stack, DRGPU_SHARING)
SCENARIOS: dict[str, tuple[str, str, Path | None, str]] = {
    "exclusive": ("", "gtx1650-m40.json", None, "exclusive"),
    "timeslice": ("DR_WORKERS=3\n", "gtx1650-m40.json", None, "timeslice"),
    "rl-coach": ("", "gtx1650-m40.json", DRFC_TRAINING, "exclusive"),
    "mig": (
        f"DR_SAGEMAKER_CUDA_DEVICES={A100_MIG_1}\nDR_ROBOMAKER_CUDA_DEVICES=1\n",
        "a100-mig-plus-l4.json",
        None,
        "exclusive",
    ),
}


def manifests_for(scenario: str, tmp_path: Path) -> Manifests:
    run_env, inventory, compose, sharing = SCENARIOS[scenario]
    env_file = tmp_path / "system.env"
    shutil.copyfile(REPO / "system.env.example", env_file)
    (tmp_path / "run.env").write_text(run_env)
    config = load_config(env_file)
    stack = load_stack([compose or base_stack_file()])
    plan = make_plan(config, stack, load_inventory(INVENTORIES / inventory))
    model = resolve_stack(config, stack.files)
    return render_manifests(plan, model, workers=config.workers, sharing=sharing)


def documents(manifests: Manifests) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(manifests.text) if doc is not None]


def deployment(manifests: Manifests, service: str) -> dict[str, Any]:
    for doc in documents(manifests):
        if doc["kind"] == "Deployment" and doc["metadata"]["name"].endswith(f"-{service}"):
            return doc
    raise AssertionError(f"no Deployment for {service}")


def container(manifests: Manifests, service: str) -> dict[str, Any]:
    found = deployment(manifests, service)["spec"]["template"]["spec"]["containers"][0]
    assert isinstance(found, dict)
    return found


def env(manifests: Manifests, service: str) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container(manifests, service)["env"]}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_manifests_match_the_golden_file(scenario: str, tmp_path: Path, golden: ModuleType) -> None:
    golden.assert_matches_golden(f"k8s-{scenario}.yml", manifests_for(scenario, tmp_path).text)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_manifests_validate_against_the_kubernetes_schema(scenario: str, tmp_path: Path) -> None:
    version = kubernetes_validate.latest_version()
    for doc in documents(manifests_for(scenario, tmp_path)):
        kubernetes_validate.validate(doc, version, strict=True)


def test_gpu_services_get_gpu_limits_and_a_product_selector(tmp_path: Path) -> None:
    manifests = manifests_for("exclusive", tmp_path)
    sagemaker = deployment(manifests, "sagemaker")["spec"]["template"]["spec"]
    assert sagemaker["nodeSelector"] == {PRODUCT_LABEL: "Tesla-M40-24GB"}
    assert sagemaker["containers"][0]["resources"] == {"limits": {GPU_RESOURCE: 1}}
    robomaker = deployment(manifests, "robomaker")["spec"]["template"]["spec"]
    assert robomaker["nodeSelector"] == {PRODUCT_LABEL: "NVIDIA-GeForce-GTX-1650"}
    assert env(manifests, "sagemaker")["CUDA_VISIBLE_DEVICES"] == "0"
    assert "NVIDIA_VISIBLE_DEVICES" not in env(manifests, "sagemaker")


def test_services_without_a_gpu_see_none(tmp_path: Path) -> None:
    manifests = manifests_for("rl-coach", tmp_path)
    assert env(manifests, "coach")["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert "resources" not in container(manifests, "coach")
    assert any("Docker socket" in warning for warning in manifests.warnings)


def test_timeslice_renders_the_device_plugins_sharing_config(tmp_path: Path) -> None:
    manifests = manifests_for("timeslice", tmp_path)
    config_map = next(doc for doc in documents(manifests) if doc["kind"] == "ConfigMap")
    assert config_map["metadata"]["name"] == SHARING_CONFIG_MAP
    (config,) = config_map["data"].values()
    assert yaml.safe_load(config) == {
        "version": "v1",
        "sharing": {"timeSlicing": {"resources": [{"name": GPU_RESOURCE, "replicas": 3}]}},
    }
    assert deployment(manifests, "robomaker")["spec"]["replicas"] == 3
    selector = deployment(manifests, "robomaker")["spec"]["template"]["spec"]["nodeSelector"]
    assert selector == {PRODUCT_LABEL: "NVIDIA-GeForce-GTX-1650-SHARED"}


def test_exclusive_renders_no_sharing_config(tmp_path: Path) -> None:
    kinds = [doc["kind"] for doc in documents(manifests_for("exclusive", tmp_path))]
    assert kinds == ["Deployment", "Deployment"]


def test_mig_slices_get_no_product_selector(tmp_path: Path) -> None:
    manifests = manifests_for("mig", tmp_path)
    assert "nodeSelector" not in deployment(manifests, "sagemaker")["spec"]["template"]["spec"]
    assert any("MIG" in warning for warning in manifests.warnings)


def test_the_header_says_a_uuid_cannot_be_pinned(tmp_path: Path) -> None:
    text = manifests_for("exclusive", tmp_path).text
    assert "cannot pin a GPU UUID without dynamic resource allocation (DRA)" in text
