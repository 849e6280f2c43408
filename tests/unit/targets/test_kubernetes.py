"""Kubernetes manifests: golden files, schema validation (offline), GPUs and sharing."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes_validate
import pytest
import yaml

from drgpu.core.inputs import Inputs
from drgpu.core.modes import Sharing
from drgpu.core.planning import make_plan
from drgpu.errors import GpuValidationError
from drgpu.host.compose import resolve_stack
from drgpu.host.files import base_stack_file, load_inventory, load_stack, read_settings
from drgpu.targets.compose_override import Rendered
from drgpu.targets.kubernetes import (
    GPU_RESOURCE,
    PRODUCT_LABEL,
    SHARING_CONFIG_MAP,
    cel_string,
    kubernetes_text,
    render_manifests,
)

REPO = Path(__file__).resolve().parents[3]
INVENTORIES = REPO / "examples" / "inventories"
DRFC_TRAINING = REPO / "tests" / "golden" / "stacks" / "drfc-training.yml"
A100_MIG_1 = "MIG-a1000000-0000-4000-8000-0000000000a1"
M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"  # index 1 of gtx1650-m40.json (bus 81)
GTX = "GPU-3b1d9c52-7a4e-4f0b-8c6d-2e9f1a7b5c30"  # index 0 (bus 04)
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


# DRA scenarios: the same, rendered with --dra.
DRA_SCENARIOS: dict[str, tuple[str, str, Path | None, str]] = {
    "dra-workers": (
        "DR_WORKERS=3\nDR_ROBOMAKER_CUDA_DEVICES=0\n",
        "gtx1650-m40.json",
        None,
        "exclusive",
    ),
    "dra-rl-coach": ("", "gtx1650-m40.json", DRFC_TRAINING, "exclusive"),
    "dra-mig": SCENARIOS["mig"],
}


def manifests_for(scenario: str, tmp_path: Path) -> Rendered:
    dra = scenario in DRA_SCENARIOS
    run_env, inventory, compose, sharing = (DRA_SCENARIOS if dra else SCENARIOS)[scenario]
    env_file = tmp_path / "system.env"
    shutil.copyfile(REPO / "system.env.example", env_file)
    (tmp_path / "run.env").write_text(run_env)
    config = read_settings(Inputs(env_file))
    stack = load_stack([compose or base_stack_file()])
    plan = make_plan(config, stack, load_inventory(INVENTORIES / inventory))
    model = resolve_stack(config, stack.files)
    return render_manifests(plan, model, workers=config.workers, sharing=Sharing(sharing), dra=dra)


def documents(manifests: Rendered) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(manifests.text) if doc is not None]


def deployment(manifests: Rendered, service: str) -> dict[str, Any]:
    for doc in documents(manifests):
        if doc["kind"] == "Deployment" and doc["metadata"]["name"].endswith(f"-{service}"):
            return doc
    raise AssertionError(f"no Deployment for {service}")


def container(manifests: Rendered, service: str) -> dict[str, Any]:
    found = deployment(manifests, service)["spec"]["template"]["spec"]["containers"][0]
    assert isinstance(found, dict)
    return found


def env(manifests: Rendered, service: str) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container(manifests, service)["env"]}


@pytest.mark.parametrize("scenario", [*SCENARIOS, *DRA_SCENARIOS])
def test_manifests_match_the_golden_file(scenario: str, tmp_path: Path, golden: ModuleType) -> None:
    golden.assert_matches_golden(f"k8s-{scenario}.yml", manifests_for(scenario, tmp_path).text)


@pytest.mark.parametrize("scenario", [*SCENARIOS, *DRA_SCENARIOS])
def test_manifests_validate_against_the_kubernetes_schema(scenario: str, tmp_path: Path) -> None:
    # resource.k8s.io/v1 (DRA) is in Kubernetes 1.34 and later: check the first and the newest.
    for version in ("1.34.0", kubernetes_validate.latest_version()):
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


def claims(manifests: Rendered) -> dict[str, list[dict[str, Any]]]:
    """Each ResourceClaim's requests, by name."""
    return {
        doc["metadata"]["name"]: doc["spec"]["devices"]["requests"]
        for doc in documents(manifests)
        if doc["kind"] == "ResourceClaim"
    }


def selector(uuid: str) -> str:
    return f'device.attributes["gpu.nvidia.com"].uuid == "{uuid}"'


def test_dra_claims_name_each_gpu_by_uuid_and_pods_use_them(tmp_path: Path) -> None:
    manifests = manifests_for("dra-workers", tmp_path)
    found = claims(manifests)
    assert found["deepracer-0-sagemaker-gpus"] == [
        {
            "name": "gpu-0",
            "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "allocationMode": "ExactCount",
                "count": 1,
                "selectors": [{"cel": {"expression": selector(M40)}}],
            },
        }
    ]
    sagemaker = deployment(manifests, "sagemaker")["spec"]["template"]["spec"]
    assert sagemaker["resourceClaims"] == [
        {"name": "gpus", "resourceClaimName": "deepracer-0-sagemaker-gpus"}
    ]
    assert sagemaker["containers"][0]["resources"] == {"claims": [{"name": "gpus"}]}
    assert "nodeSelector" not in sagemaker
    assert env(manifests, "sagemaker")["CUDA_VISIBLE_DEVICES"] == M40
    assert "limits" not in str(sagemaker)


def test_dra_workers_are_deployments_of_their_own_sharing_their_gpus_claim(
    tmp_path: Path,
) -> None:
    manifests = manifests_for("dra-workers", tmp_path)
    workers = [deployment(manifests, f"robomaker-{slot}") for slot in (1, 2, 3)]
    names = [
        w["spec"]["template"]["spec"]["resourceClaims"][0]["resourceClaimName"] for w in workers
    ]
    assert names == ["deepracer-0-robomaker-1-gpus"] * 3
    assert [w["spec"]["replicas"] for w in workers] == [1, 1, 1]
    assert [env(manifests, f"robomaker-{slot}")["DOCKER_REPLICA_SLOT"] for slot in (1, 2, 3)] == [
        "1",
        "2",
        "3",
    ]
    requests = claims(manifests)["deepracer-0-robomaker-1-gpus"]
    assert [r["exactly"]["selectors"][0]["cel"]["expression"] for r in requests] == [selector(GTX)]


def test_dra_mig_slices_use_the_mig_device_class(tmp_path: Path) -> None:
    requests = claims(manifests_for("dra-mig", tmp_path))["deepracer-0-sagemaker-gpus"]
    assert requests[0]["exactly"]["deviceClassName"] == "mig.nvidia.com"
    assert requests[0]["exactly"]["selectors"][0]["cel"]["expression"] == selector(A100_MIG_1)


def test_rl_coach_forwards_the_trainers_uuid_in_pci_order(tmp_path: Path) -> None:
    for scenario in ("rl-coach", "dra-rl-coach"):
        coach = env(manifests_for(scenario, tmp_path), "coach")
        assert coach["CUDA_VISIBLE_DEVICES"] == M40
        assert coach["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert coach["NVIDIA_VISIBLE_DEVICES"] == "void"


@pytest.mark.parametrize(
    ("compose", "kubernetes"),
    [
        ("cost $$5", "cost $5"),
        ("$$(HOME) stays", "$$(HOME) stays"),
        ("$${X} and $$$$", "${X} and $$$"),
        ("plain", "plain"),
    ],
)
def test_values_are_unescaped_for_compose_and_escaped_for_kubernetes(
    compose: str, kubernetes: str
) -> None:
    assert kubernetes_text(compose) == kubernetes


def stack_with(tmp_path: Path, body: str, run_env: str = "") -> Rendered:
    compose = tmp_path / "docker-compose.yml"
    compose.write_text(body)
    env_file = tmp_path / "system.env"
    env_file.write_text("DR_SAGEMAKER_CUDA_DEVICES=1\nDR_ROBOMAKER_CUDA_DEVICES=0\n" + run_env)
    config = read_settings(Inputs(env_file))
    stack = load_stack([compose])
    plan = make_plan(config, stack, load_inventory(INVENTORIES / "gtx1650-m40.json"))
    model = resolve_stack(config, stack.files)
    return render_manifests(
        plan, model, workers=config.workers, sharing=config.sharing, secrets=config.secrets
    )


def test_compose_dollars_never_reach_kubernetes(tmp_path: Path) -> None:
    manifests = stack_with(
        tmp_path,
        "services:\n  sagemaker:\n    image: t:1\n    command: [echo, '$$(date)']\n"
        "    environment:\n      PRICE: cost $$5\n",
    )
    assert env(manifests, "sagemaker")["PRICE"] == "cost $5"
    assert container(manifests, "sagemaker")["args"] == ["echo", "$$(date)"]


def test_secrets_go_into_a_secret_referenced_by_secret_key_ref(tmp_path: Path) -> None:
    manifests = stack_with(
        tmp_path,
        "services:\n  sagemaker:\n    image: t:1\n    environment:\n"
        "      AWS_SECRET_ACCESS_KEY: s3cr3t\n      RUN_ID: '1'\n",
    )
    secret = next(doc for doc in documents(manifests) if doc["kind"] == "Secret")
    assert secret["stringData"] == {"AWS_SECRET_ACCESS_KEY": "s3cr3t"}
    entries = {item["name"]: item for item in container(manifests, "sagemaker")["env"]}
    assert entries["AWS_SECRET_ACCESS_KEY"] == {
        "name": "AWS_SECRET_ACCESS_KEY",
        "valueFrom": {
            "secretKeyRef": {"name": secret["metadata"]["name"], "key": "AWS_SECRET_ACCESS_KEY"}
        },
    }
    assert "s3cr3t" not in manifests.shown
    assert "s3cr3t" in manifests.text
    for doc in documents(manifests):
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_a_secret_passed_on_under_another_name_goes_into_the_secret(tmp_path: Path) -> None:
    manifests = stack_with(
        tmp_path,
        "services:\n  sagemaker:\n    image: t:1\n    environment:\n"
        "      PASS_ON: ${DR_MINIO_PASSWORD}\n      REMOTE: ${DR_REMOTE_URL}\n"
        "      RUN_ID: '1'\n",
        "DR_MINIO_PASSWORD=minioPW33\nDR_REMOTE_URL=http://bob:urlPW22@minio:9000\n",
    )
    secret = next(doc for doc in documents(manifests) if doc["kind"] == "Secret")
    assert secret["stringData"] == {
        "PASS_ON": "minioPW33",
        "REMOTE": "http://bob:urlPW22@minio:9000",
    }
    plain = {item["name"] for item in container(manifests, "sagemaker")["env"] if "value" in item}
    assert "RUN_ID" in plain and not plain & {"PASS_ON", "REMOTE"}
    assert "minioPW33" not in manifests.shown and "urlPW22" not in manifests.shown


def test_more_workers_than_gpus_is_refused_without_sharing(tmp_path: Path) -> None:
    body = "services:\n  sagemaker:\n    image: t:1\n  robomaker:\n    image: s:1\n"
    with pytest.raises(GpuValidationError) as refused:
        stack_with(
            tmp_path,
            body,
            "DR_WORKERS=3\nDR_ROBOMAKER_CUDA_DEVICES=1,0\nDR_SAGEMAKER_CUDA_DEVICES=\n",
        )
    assert "robomaker: 3 pod(s) of 1 GPU(s) need 3 GPUs of their own" in refused.value.message
    assert refused.value.hint is not None and "--dra" in refused.value.hint


@pytest.mark.parametrize(
    ("text", "literal"),
    [
        ("GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11", '"GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"'),
        ('GPU-x" || true || "x', r'"GPU-x\" || true || \"x"'),
        ("a\\b\nc", r'"a\\b\nc"'),
    ],
)
def test_text_in_a_cel_selector_is_a_quoted_string_literal(text: str, literal: str) -> None:
    assert cel_string(text) == literal


def test_an_evaluations_rl_coach_is_not_said_to_start_a_trainer(tmp_path: Path) -> None:
    env_file = tmp_path / "system.env"
    shutil.copyfile(REPO / "system.env.example", env_file)
    (tmp_path / "run.env").write_text("")
    for evaluation in (False, True):
        config = read_settings(Inputs(env_file, evaluation=evaluation))
        stack = load_stack([DRFC_TRAINING])
        plan = make_plan(config, stack, load_inventory(INVENTORIES / "gtx1650-m40.json"))
        model = resolve_stack(config, stack.files)
        rendered = render_manifests(plan, model, workers=config.workers, sharing=config.sharing)
        said = any("SageMaker local mode" in warning for warning in rendered.warnings)
        assert said is not evaluation
