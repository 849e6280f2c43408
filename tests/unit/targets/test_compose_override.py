"""The rendered Compose override: golden files, determinism, and its structure read back."""

from __future__ import annotations

import re
import shutil
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from drgpu.core.compose_stack import Stack
from drgpu.core.inputs import Inputs
from drgpu.core.model import HEADER_MARK, Inventory, Plan
from drgpu.core.modes import DeviceDriver
from drgpu.core.planning import make_plan
from drgpu.host.files import (
    base_stack_file,
    load_inventory,
    load_stack,
    override_header_template,
    read_settings,
)
from drgpu.targets.compose_override import render_override

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_ENV = REPO / "system.env.example"
GTX_M40 = REPO / "examples" / "inventories" / "gtx1650-m40.json"
MIG_L4 = REPO / "examples" / "inventories" / "a100-mig-plus-l4.json"
DRFC_TRAINING = REPO / "tests" / "golden" / "stacks" / "drfc-training.yml"
THREE_GPUS = REPO / "tests" / "topologies" / "three-gpus-unordered.json"

M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"
GTX1650 = "GPU-3b1d9c52-7a4e-4f0b-8c6d-2e9f1a7b5c30"
A100_MIG_1 = "MIG-a1000000-0000-4000-8000-0000000000a1"
L4 = "GPU-14000000-0000-4000-8000-000000000002"
FULL_UUID = re.compile(r"^(GPU|MIG)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

RESET_STACK = """\
services:
  sagemaker:
    image: trainer
    gpus: all
  robomaker:
    image: sim
    deploy:
      resources:
        reservations:
          devices:
            - driver: nvidia
              count: all
              capabilities: [gpu]
  redis:
    image: redis
"""


@dataclass(frozen=True)
class Tagged:
    """A node read back with one of compose's merge tags."""

    tag: str
    value: Any


class OverrideLoader(yaml.SafeLoader):
    """Reads `!override` and `!reset` as `Tagged` values, as Compose would see them."""


def _tagged(loader: yaml.SafeLoader, node: yaml.Node) -> Tagged:
    value: Any
    if isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    elif isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
    else:
        value = loader.construct_scalar(node)  # type: ignore[arg-type]
    return Tagged(node.tag, value)


OverrideLoader.add_constructor("!override", _tagged)
OverrideLoader.add_constructor("!reset", _tagged)


def override(plan: Plan) -> str:
    """The plan's compose override, under drgpu's header."""
    return render_override(plan, override_header_template())


def read_back(text: str) -> dict[str, Any]:
    document = yaml.load(text, Loader=OverrideLoader)
    assert isinstance(document, dict)
    return document


def stack_settings(tmp_path: Path, overrides: str = "") -> Path:
    """system.env.example copied into tmp_path, with `overrides` in a run.env beside it."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    env_file = tmp_path / "system.env"
    shutil.copyfile(EXAMPLE_ENV, env_file)
    (tmp_path / "run.env").write_text(textwrap.dedent(overrides), encoding="utf-8")
    return env_file


def make(env_file: Path, inventory: Inventory, stack: Stack | None = None) -> Plan:
    return make_plan(
        read_settings(Inputs(env_file)), stack or load_stack([base_stack_file()]), inventory
    )


def plan_for(scenario: str, tmp_path: Path) -> Plan:
    if scenario == "gtx1650-m40":
        return make(stack_settings(tmp_path), load_inventory(GTX_M40))
    if scenario == "mig-trainer":
        env_file = stack_settings(
            tmp_path, f"DR_SAGEMAKER_CUDA_DEVICES={A100_MIG_1}\nDR_ROBOMAKER_CUDA_DEVICES=1\n"
        )
        return make(env_file, load_inventory(MIG_L4))
    if scenario == "rl-coach":
        return make(stack_settings(tmp_path), load_inventory(GTX_M40), load_stack([DRFC_TRAINING]))
    if scenario == "host-x":
        return make(stack_settings(tmp_path, "DR_HOST_X=true\n"), load_inventory(GTX_M40))
    if scenario == "cpu-only":
        env_file = stack_settings(
            tmp_path, "DR_SAGEMAKER_CUDA_DEVICES=\nDR_ROBOMAKER_CUDA_DEVICES=\n"
        )
        return make(env_file, Inventory(gpus=()))
    if scenario == "resets":
        env_file = stack_settings(tmp_path, "DR_ROBOMAKER_CUDA_DEVICES=none\n")
        compose = tmp_path / "docker-compose.yml"
        compose.write_text(RESET_STACK, encoding="utf-8")
        return make(env_file, load_inventory(GTX_M40), load_stack([compose]))
    if scenario in ("cdi", "cdi-mig"):
        plan = plan_for("gtx1650-m40" if scenario == "cdi" else "mig-trainer", tmp_path)
        return replace(plan, device_driver=DeviceDriver.CDI)
    return _sharing_plan_for(scenario, tmp_path)


def _sharing_plan_for(scenario: str, tmp_path: Path) -> Plan:
    """The scenarios of several workers, `auto` and the sharing modes."""
    workers = "DR_SAGEMAKER_CUDA_DEVICES=2\nDR_ROBOMAKER_CUDA_DEVICES=0,1\nDR_WORKERS=3\n"
    if scenario == "workers":
        return make(stack_settings(tmp_path, workers), load_inventory(THREE_GPUS))
    if scenario == "workers-pack":
        env_file = stack_settings(tmp_path, workers + "DRGPU_WORKER_PLACEMENT=pack\n")
        return make(env_file, load_inventory(THREE_GPUS))
    if scenario == "workers-files":
        env_file = stack_settings(tmp_path, "DR_WORKERS=2\n")
        first, second = tmp_path / "training.yml", tmp_path / "keys.yml"
        first.write_text(DRFC_TRAINING.read_text(), encoding="utf-8")
        second.write_text("services:\n  robomaker:\n    env_file: keys.env\n", encoding="utf-8")
        return make(env_file, load_inventory(GTX_M40), load_stack([first, second]))
    if scenario == "auto":
        env_file = stack_settings(
            tmp_path,
            "DR_SAGEMAKER_CUDA_DEVICES=auto\nDR_ROBOMAKER_CUDA_DEVICES=auto\nDR_WORKERS=2\n",
        )
        return make(env_file, load_inventory(THREE_GPUS))
    if scenario == "timeslice":
        env_file = stack_settings(
            tmp_path, "DR_ROBOMAKER_CUDA_DEVICES=1\nDRGPU_SHARING=timeslice\n"
        )
        return make(env_file, load_inventory(GTX_M40))
    if scenario == "mps":
        env_file = stack_settings(
            tmp_path,
            """\
            DR_ROBOMAKER_CUDA_DEVICES=1
            DR_WORKERS=2
            DRGPU_SHARING=mps
            DRGPU_MPS_SAGEMAKER_THREADS=60
            DRGPU_MPS_ROBOMAKER_THREADS=20
            DRGPU_MPS_SAGEMAKER_MEMORY=8G
            DRGPU_MPS_ROBOMAKER_MEMORY=2048M
            """,
        )
        return make(env_file, load_inventory(GTX_M40))
    raise AssertionError(scenario)


SCENARIOS = [
    "gtx1650-m40",
    "mig-trainer",
    "rl-coach",
    "host-x",
    "cpu-only",
    "resets",
    "workers",
    "workers-pack",
    "workers-files",
    "auto",
    "timeslice",
    "mps",
    "cdi",
    "cdi-mig",
]


def portable(text: str, tmp_path: Path) -> str:
    """The rendered text with the paths of this checkout and of the test's files replaced."""
    return text.replace(str(REPO), "<repo>").replace(str(tmp_path), "<tmp>")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rendering_matches_the_golden_file(
    scenario: str, tmp_path: Path, golden: ModuleType
) -> None:
    text = override(plan_for(scenario, tmp_path))
    golden.assert_matches_golden(f"{scenario}.yml", portable(text, tmp_path))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rendering_twice_is_byte_identical(scenario: str, tmp_path: Path) -> None:
    first = override(plan_for(scenario, tmp_path / "first"))
    second = override(plan_for(scenario, tmp_path / "second"))
    assert (
        portable(first, tmp_path / "first").encode()
        == portable(second, tmp_path / "second").encode()
    )


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rendering_starts_with_drgpus_header(scenario: str, tmp_path: Path) -> None:
    plan = plan_for(scenario, tmp_path)
    text = override(plan)
    assert text.startswith(HEADER_MARK)
    assert plan.project in text.splitlines()[0]


def test_an_installation_without_the_header_template_renders_a_one_line_header(
    tmp_path: Path,
) -> None:
    plan = plan_for("gtx1650-m40", tmp_path)
    header, body = render_override(plan, None).split("\n", 1)
    assert header == f"{HEADER_MARK} for compose project {plan.project}."
    assert body == override(plan).split("\n", 3)[3]  # the template's three lines


def test_the_header_says_whose_bare_indices_the_settings_read(tmp_path: Path) -> None:
    inventory = load_inventory(GTX_M40)
    pci = override(make(stack_settings(tmp_path), inventory)).splitlines()[2]
    assert pci == (
        "# GPU indices in system.env are nvidia-smi's (PCI bus order); this file names full UUIDs."
    )
    in_cuda_order = make(stack_settings(tmp_path, "DRGPU_INDEX_ORDER=cuda\n"), inventory)
    cuda = override(in_cuda_order).splitlines()[2]
    assert "are CUDA's (its default order, fastest first: DRGPU_INDEX_ORDER=cuda);" in cuda


def services_of(scenario: str, tmp_path: Path) -> dict[str, Any]:
    services = read_back(override(plan_for(scenario, tmp_path)))["services"]
    assert isinstance(services, dict)
    return services


def devices_of(service: dict[str, Any]) -> Tagged:
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert isinstance(devices, Tagged)
    return devices


def test_device_requests_override_with_full_uuids(tmp_path: Path) -> None:
    services = services_of("gtx1650-m40", tmp_path)
    for name, uuid in (("sagemaker", M40), ("robomaker", GTX1650)):
        devices = devices_of(services[name])
        assert devices.tag == "!override"
        assert [request["device_ids"] for request in devices.value] == [[uuid]]
        assert all(FULL_UUID.match(uuid) for uuid in devices.value[0]["device_ids"])
        assert devices.value[0]["driver"] == "nvidia"


def test_capabilities_per_role_are_rendered(tmp_path: Path) -> None:
    services = services_of("gtx1650-m40", tmp_path)
    assert devices_of(services["sagemaker"]).value[0]["capabilities"] == [
        "gpu",
        "compute",
        "utility",
    ]
    assert devices_of(services["robomaker"]).value[0]["capabilities"] == [
        "gpu",
        "compute",
        "utility",
        "graphics",
    ]


def test_host_x_renders_the_display_capability(tmp_path: Path) -> None:
    services = services_of("host-x", tmp_path)
    assert "display" in devices_of(services["robomaker"]).value[0]["capabilities"]
    assert "display" not in devices_of(services["sagemaker"]).value[0]["capabilities"]


def test_services_with_gpus_get_pci_bus_order_and_their_uuids(tmp_path: Path) -> None:
    services = services_of("gtx1650-m40", tmp_path)
    for name, uuid in (("sagemaker", M40), ("robomaker", GTX1650)):
        assert services[name]["environment"] == {
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": uuid,
            "NVIDIA_VISIBLE_DEVICES": uuid,
        }


def test_mig_trainer_gets_its_mig_uuid(tmp_path: Path) -> None:
    services = services_of("mig-trainer", tmp_path)
    assert devices_of(services["sagemaker"]).value[0]["device_ids"] == [A100_MIG_1]
    assert services["sagemaker"]["environment"]["CUDA_VISIBLE_DEVICES"] == A100_MIG_1
    assert devices_of(services["robomaker"]).value[0]["device_ids"] == [L4]


def test_rl_coach_renders_without_a_device_request(tmp_path: Path) -> None:
    rl_coach = services_of("rl-coach", tmp_path)["rl_coach"]
    assert "deploy" not in rl_coach
    assert rl_coach["environment"] == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": M40,
        "NVIDIA_VISIBLE_DEVICES": "void",
    }


def test_cpu_only_stack_renders_void_and_no_device_requests(tmp_path: Path) -> None:
    services = services_of("cpu-only", tmp_path)
    assert list(services) == ["sagemaker", "robomaker"]
    for service in services.values():
        assert service["environment"] == {"NVIDIA_VISIBLE_DEVICES": "void"}
        assert "deploy" not in service


def test_resets_are_rendered_with_compose_reset_tags(tmp_path: Path) -> None:
    services = services_of("resets", tmp_path)
    assert services["sagemaker"]["gpus"].tag == "!reset"
    assert devices_of(services["sagemaker"]).tag == "!override"
    assert devices_of(services["robomaker"]) == Tagged("!reset", [])
    assert "deploy" not in services["redis"]
    assert "gpus" not in services["redis"]


def test_labels_are_strings(tmp_path: Path) -> None:
    labels = services_of("gtx1650-m40", tmp_path)["sagemaker"]["labels"]
    assert labels == {"drgpu.gpus": M40, "drgpu.role": "trainer", "drgpu.run_id": "0"}


def test_replaced_robomaker_gets_zero_replicas_and_workers_one(tmp_path: Path) -> None:
    services = services_of("workers", tmp_path)
    assert services["robomaker"]["scale"] == Tagged("!reset", "")
    assert services["robomaker"]["deploy"] == {"replicas": 0}
    worker = services["robomaker-2"]
    assert worker["extends"] == {"file": str(base_stack_file()), "service": "robomaker"}
    assert worker["scale"] == Tagged("!reset", "")
    assert worker["deploy"]["replicas"] == 1
    assert worker["environment"]["DOCKER_REPLICA_SLOT"] == "2"


def test_a_service_in_two_files_is_extended_from_each_in_its_own_document(
    tmp_path: Path,
) -> None:
    text = override(plan_for("workers-files", tmp_path))
    first, last = yaml.load_all(text, Loader=OverrideLoader)
    assert first == {
        "services": {
            name: {"extends": {"file": str(tmp_path / "training.yml"), "service": "robomaker"}}
            for name in ("robomaker-1", "robomaker-2")
        }
    }
    assert last["services"]["robomaker-1"]["extends"] == {
        "file": str(tmp_path / "keys.yml"),
        "service": "robomaker",
    }


def test_mps_renders_the_daemon_its_clients_and_tmpfs_volumes(tmp_path: Path) -> None:
    document = read_back(override(plan_for("mps", tmp_path)))
    daemon = document["services"]["drgpu-mps"]
    assert daemon["ipc"] == "shareable"
    assert daemon["command"][:2] == ["sh", "-c"]
    assert devices_of(daemon).value[0]["device_ids"] == [M40]
    for name in ("sagemaker", "robomaker-1", "robomaker-2"):
        client = document["services"][name]
        assert client["ipc"] == "service:drgpu-mps"
        assert client["depends_on"] == {"drgpu-mps": {"condition": "service_started"}}
        assert "drgpu-mps-pipe:/tmp/nvidia-mps" in client["volumes"]
    assert document["volumes"] == {
        name: {"driver_opts": {"type": "tmpfs", "device": "tmpfs"}}
        for name in ("drgpu-mps-pipe", "drgpu-mps-log")
    }


def test_a_cdi_request_names_each_gpu_by_its_cdi_name(tmp_path: Path) -> None:
    """DRGPU_DEVICE_DRIVER=cdi: `driver: cdi` and `nvidia.com/gpu=<UUID>` (a MIG UUID as
    it is); the labels still name bare UUIDs, which status and cuda-check read."""
    plan = plan_for("cdi-mig", tmp_path)
    services = read_back(override(plan))["services"]
    trainer = services["sagemaker"]["deploy"]["resources"]["reservations"]["devices"]
    [request] = trainer.value
    assert request["driver"] == "cdi"
    assert request["device_ids"] == [f"nvidia.com/gpu={A100_MIG_1}"]
    assert services["sagemaker"]["labels"]["drgpu.gpus"] == A100_MIG_1


def test_values_reach_compose_as_written_never_interpolated() -> None:
    from drgpu.core.model import Role, ServicePlan

    service = ServicePlan(
        name="mps",
        role=Role.OTHER,
        devices=(),
        capabilities=(),
        environment=(("NOTE", "cost $5 ${HOME}"),),
        labels=(("drgpu.note", "$USER"),),
        image="${MPS_IMAGE:-evil}",
        command=("sh", "-c", "echo $$"),
    )
    plan = Plan(project="deepracer-0", run_id="0", services=(service,))
    body = yaml.load(render_override(plan, None), Loader=OverrideLoader)["services"]["mps"]
    assert body["image"] == "$${MPS_IMAGE:-evil}"
    assert body["command"] == ["sh", "-c", "echo $$$$"]
    assert body["environment"] == {"NOTE": "cost $$5 $${HOME}"}
    assert body["labels"] == {"drgpu.note": "$$USER"}
