"""`drgpu swarm-setup`: the settings a node needs, and every way a node differs from them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from drgpu.core.facts import EngineFacts, NodeFacts
from drgpu.core.findings import failed
from drgpu.core.swarm_node import (
    FAIL,
    GPU_KIND,
    OK,
    TOOLKIT_LINE,
    NodeState,
    SetupReport,
    SwarmLayout,
    report,
    swarm_layout,
    wanted_resources,
)
from drgpu.core.toolkit import ToolkitFacts
from drgpu.errors import ConfigError
from drgpu.host.files import load_inventory

REPO = Path(__file__).resolve().parents[3]
INVENTORIES = REPO / "examples" / "inventories"
M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"
GTX1650 = "GPU-3b1d9c52-7a4e-4f0b-8c6d-2e9f1a7b5c30"
RESOURCES = (f"NVIDIA-GPU={M40}", f"NVIDIA-GPU={GTX1650}")
DAEMON = Path("/etc/docker/daemon.json")
TOOLKIT = Path("/etc/nvidia-container-runtime/config.toml")
GOOD_ENGINE = EngineFacts(
    version="20.10.24",
    default_runtime="nvidia",
    runtimes=("nvidia", "runc"),
    generic_resources=RESOURCES,
    swarm_state="active",
    node_labels={"Sagemaker": "true"},
)
GOOD = NodeState(
    daemon_json={
        "default-runtime": "nvidia",
        "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}},
        "node-generic-resources": list(RESOURCES),
    },
    daemon_json_problem=None,
    toolkit=ToolkitFacts((1, 19, 0), "legacy", "DOCKER_RESOURCE_NVIDIA-GPU"),
    toolkit_problem=None,
    engine=GOOD_ENGINE,
    engine_problem=None,
)


def check(state: NodeState) -> SetupReport:
    return report(RESOURCES, state, DAEMON, TOOLKIT)


def differences(state: NodeState) -> list[str]:
    return [f"{f.subject}: {f.message}" for f in check(state).findings if f.level == FAIL]


def test_resources_are_full_uuids_in_nvml_order() -> None:
    inventory = load_inventory(REPO / "tests" / "inventories" / "m40-first.json")
    assert wanted_resources(inventory) == RESOURCES


def test_a_gpu_in_mig_mode_is_advertised_by_its_slices() -> None:
    resources = wanted_resources(load_inventory(INVENTORIES / "a100-mig-plus-l4.json"))
    assert resources == (
        "NVIDIA-GPU=MIG-a1000000-0000-4000-8000-0000000000a1",
        "NVIDIA-GPU=MIG-a1000000-0000-4000-8000-0000000000a2",
        "NVIDIA-GPU=GPU-14000000-0000-4000-8000-000000000002",
    )


def test_a_node_set_up_as_printed_passes() -> None:
    setup = check(GOOD)
    assert not failed(setup.findings)
    assert [f.level for f in setup.findings].count(OK) >= 5


def test_the_toolkit_name_mismatch_of_issue_57_is_caught() -> None:
    (difference,) = differences(
        replace(GOOD, toolkit=replace(GOOD.toolkit, swarm_resource="DOCKER_RESOURCE_GPU"))
    )
    assert "nvidia-container-toolkit#57" in difference
    assert TOOLKIT_LINE in difference


def test_a_resource_of_another_kind_is_caught() -> None:
    daemon_json = {**dict(GOOD.daemon_json or {}), "node-generic-resources": [f"gpu={M40}"]}
    found = differences(replace(GOOD, daemon_json=daemon_json))
    assert any("kind 'gpu' is not 'NVIDIA-GPU'" in line for line in found)
    assert any(f"missing NVIDIA-GPU={M40}" in line for line in found)


def test_shortened_uuids_are_not_this_nodes_gpus() -> None:
    daemon_json = {
        **dict(GOOD.daemon_json or {}),
        "node-generic-resources": [*RESOURCES, "NVIDIA-GPU=GPU-6f0c2a4e"],
    }
    (difference,) = differences(replace(GOOD, daemon_json=daemon_json))
    assert "NVIDIA-GPU=GPU-6f0c2a4e: not a GPU of this node" in difference


def test_an_engine_not_restarted_after_the_change_is_caught() -> None:
    engine = replace(GOOD_ENGINE, generic_resources=(), default_runtime="runc")
    found = differences(replace(GOOD, engine=engine))
    assert any("restart dockerd" in line for line in found)
    assert any("engine: default runtime: runc" in line for line in found)


def test_the_wanted_daemon_json_keeps_the_users_settings() -> None:
    state = replace(
        GOOD,
        daemon_json={"log-driver": "journald", "node-generic-resources": ["FPGA=1", "gpu=GPU-x"]},
    )
    wanted = check(state).daemon_json
    assert wanted["log-driver"] == "journald"
    assert wanted["node-generic-resources"] == ["FPGA=1", *RESOURCES]
    assert wanted["default-runtime"] == "nvidia"


def test_auto_pins_on_a_one_node_swarm_and_reserves_on_several() -> None:
    def engine(labels: dict[str, dict[str, str]]) -> EngineFacts:
        return EngineFacts(
            version="20.10",
            default_runtime="nvidia",
            runtimes=("nvidia", "runc"),
            generic_resources=(f"{GPU_KIND}={GTX1650}",),
            swarm_state="active",
            node_id="me",
            nodes=tuple(
                NodeFacts(id_, id_, "worker", "ready", node_labels)
                for id_, node_labels in labels.items()
            ),
        )

    alone = swarm_layout({}, engine({"me": {"Robomaker": "true"}}))
    assert alone == SwarmLayout(pin_simulators=True, node_id="me", advertised=(GTX1650,))
    many = swarm_layout({}, engine({"me": {}, "other": {"Robomaker": "true"}}))
    assert not many.pin_simulators
    pinned = swarm_layout({"DRGPU_SWARM_GPUS": "pin"}, engine({"other": {"Robomaker": "true"}}))
    assert pinned.pin_simulators
    assert swarm_layout({"DRGPU_SWARM_GPUS": "generic"}, None) == SwarmLayout(pin_simulators=False)


def test_an_unknown_swarm_gpus_mode_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"DRGPU_SWARM_GPUS='spread': expected one of auto"):
        swarm_layout({"DRGPU_SWARM_GPUS": " Spread "}, None)


def test_every_finding_has_a_kind_and_an_unknown_mode_reads_well() -> None:
    broken = replace(
        GOOD,
        daemon_json={},
        toolkit=ToolkitFacts(None, None, "DOCKER_RESOURCE_GPU"),
        engine=replace(GOOD_ENGINE, swarm_state="inactive", default_runtime="runc"),
    )
    for state in (GOOD, broken, replace(GOOD, daemon_json=None, engine=None)):
        findings = report(RESOURCES, state, DAEMON, TOOLKIT, kept=(M40,)).findings
        assert all(f.kind for f in findings), [f for f in findings if not f.kind]
    [mode] = [f for f in check(broken).findings if f.kind == "toolkit-mode"]
    assert mode.message.startswith("the toolkit's version is unknown, so is the runtime's mode")
    assert "?" not in mode.message
