"""Swarm from the command line: render and plan in swarm style, and swarm-setup."""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from drgpu.core.swarm_node import SIMULATOR_CONSTRAINT, TOOLKIT_LINE
from drgpu.host import nvml
from drgpu.host.files import load_inventory
from tests.cli.conftest import GTX1650, GTX_M40, M40
from tests.support.runners import run_main
from tests.unit.core.test_swarm_node import GOOD, GOOD_ENGINE, RESOURCES

G = "GPU-22222222-0000-4000-8000-000000000000"


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
    assert "spread" not in table  # no per-GPU reason the engine's choice will not follow
    assert "why robomaker: the engine chooses among the GPUs its node advertises" in table
    said = run_main(*args).err
    assert "DR_ROBOMAKER_CUDA_DEVICES=1 is not how the simulators get GPUs on this swarm" in said


def test_plan_on_a_manager_says_which_gpus_each_node_advertises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from drgpu.core.facts import NodeFacts
    from drgpu.host import swarm_engine

    (tmp_path / "system.env").write_text("DR_DOCKER_STYLE=swarm\nDR_WORKERS=2\n")
    worker = NodeFacts("w" * 25, "bed", "worker", "ready", {"Robomaker": "true"}, (G,))
    manager = replace(GOOD_ENGINE, node_id="m" * 25, nodes=(worker,))
    monkeypatch.setattr(swarm_engine, "this_swarm", lambda: (manager, None))
    monkeypatch.setattr(nvml, "read_inventory", lambda: load_inventory(GTX_M40))
    args: list[str | Path] = ["plan", "--env-file", tmp_path / "system.env"]
    [node] = json.loads(run_main(*args, "--json").out)["swarm"]["nodes"]
    assert (node["id"], node["advertised_gpus"], node["labels"]) == (worker.id, [G], worker.labels)
    assert f"node bed (wwwwwwwwwwww), worker, Robomaker=true: advertises {G}" in run_main(*args).out


def _two_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, simulators: str, *, manager_gpus: bool = True
) -> list[str | Path]:
    """`plan` on a manager (GTX_M40, advertising its GTX 1650 when `manager_gpus`) whose
    worker advertises G, the simulators' GPUs set to `simulators`."""
    from drgpu.core.facts import NodeFacts
    from drgpu.host import swarm_engine

    (tmp_path / "system.env").write_text(
        f"DR_DOCKER_STYLE=swarm\nDR_WORKERS=2\nDR_SAGEMAKER_CUDA_DEVICES=1\n"
        f"DR_ROBOMAKER_CUDA_DEVICES={simulators}\n"
    )
    m, w = "m" * 25, "w" * 25
    nodes = (
        NodeFacts(m, "bed", "manager", "ready", {}, (GTX1650,) if manager_gpus else ()),
        NodeFacts(w, "bed", "worker", "ready", {"Robomaker": "true"}, (G,)),
    )
    manager = replace(GOOD_ENGINE, node_id=m, nodes=nodes)
    monkeypatch.setattr(swarm_engine, "this_swarm", lambda: (manager, None))
    monkeypatch.setattr(nvml, "read_inventory", lambda: load_inventory(GTX_M40))
    return ["plan", "--env-file", tmp_path / "system.env"]


def test_the_simulators_may_name_another_nodes_gpu_and_are_pinned_to_that_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = _two_nodes(tmp_path, monkeypatch, G)
    done = run_main(*args, "--json")
    assert done.code == 0, done.err
    robomaker = json.loads(done.out)["swarm"]["services"]["robomaker"]
    assert robomaker["pinned_by_slot"] == [[G], [G]]
    assert robomaker["constraints"] == [SIMULATOR_CONSTRAINT, f"node.id == {'w' * 25}"]
    table = run_main(*args).out
    assert f"slot 1: {G} on node bed (wwwwwwwwwwww)" in table
    assert "on node wwwwwwwwwwww x 2 replicas" in table
    rendered = run_main("render", "--env-file", tmp_path / "system.env", "--swarm").out
    assert f"node.id == {'w' * 25}" in rendered
    # The simulators' GPUs on two nodes: one service cannot be constrained to both.
    args = _two_nodes(tmp_path, monkeypatch, f"{G},{GTX1650}")
    done = run_main(*args)
    assert done.code == 3
    assert "the simulators' GPUs must all be on one node" in done.err


def test_a_uuid_no_node_advertises_is_refused_naming_each_nodes_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unknown = "GPU-99999999-0000-4000-8000-000000000000"
    done = run_main(*_two_nodes(tmp_path, monkeypatch, unknown))
    assert done.code == 3
    assert f"no GPU matches {unknown!r}" in done.err
    assert f"node bed (wwwwwwwwwwww), worker, Robomaker=true: advertises {G}" in done.err


def test_a_bare_index_is_refused_only_where_several_nodes_advertise_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = run_main(*_two_nodes(tmp_path, monkeypatch, "0"))
    assert done.code == 2
    assert "a bare index is ambiguous on a swarm whose nodes advertise GPUs" in done.err
    assert "`drgpu plan --swarm` lists the GPUs each node advertises" in done.err
    # One node advertising GPUs (DRfC's default DR_ROBOMAKER_CUDA_DEVICES=0): as before.
    assert run_main(*_two_nodes(tmp_path, monkeypatch, "0", manager_gpus=False)).code == 0


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


@pytest.mark.parametrize("trainer", ["GPU-0a0a0a0a-0000-4000-8000-00000000000a", "0"])
def test_on_a_worker_node_the_clusters_settings_hold_no_gpu_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trainer: str
) -> None:
    """The trainer (named by the manager's UUID, or by an index) never runs on a worker:
    swarm-setup there advertises every GPU; where it may run, the UUID is still refused."""
    from drgpu.host import swarm_engine

    (tmp_path / "system.env").write_text(
        f"DR_DOCKER_STYLE=swarm\nDR_SAGEMAKER_CUDA_DEVICES={trainer}\n"
    )
    daemon_json, toolkit = tmp_path / "daemon.json", tmp_path / "config.toml"
    daemon_json.write_text(
        json.dumps({**(GOOD.daemon_json or {}), "node-generic-resources": RESOURCES})
    )
    toolkit.write_text(TOOLKIT_LINE + "\n")
    worker = replace(GOOD_ENGINE, node_labels=None, nodes=())
    monkeypatch.setattr(swarm_engine, "engine_facts", lambda: worker)
    args: list[str | Path] = ["swarm-setup", "--json", "--inventory", GTX_M40]
    args += ["--env-file", tmp_path / "system.env"]
    done = run_main(*args, "--daemon-json", daemon_json, "--toolkit-config", toolkit)
    document = json.loads(done.out)
    assert document["node_generic_resources"] == list(RESOURCES)
    assert [f["message"] for f in document["findings"] if f["subject"] == "trainer"] == [
        "the trainer does not run on this node (a worker, or its GPUs are another node's),"
        " so every GPU is advertised"
    ]
    # Not joined yet (swarm-setup comes before `docker swarm join`): the manager's UUID is
    # another node's GPU, an index may be this node's.
    monkeypatch.setattr(
        swarm_engine, "engine_facts", lambda: replace(worker, swarm_state="inactive")
    )
    unjoined = run_main(*args, "--daemon-json", daemon_json, "--toolkit-config", toolkit)
    assert unjoined.code == 6  # no swarm yet
    advertised = json.loads(unjoined.out)["node_generic_resources"]
    assert advertised == list(RESOURCES if trainer.startswith("GPU-") else RESOURCES[1:])
    monkeypatch.setattr(swarm_engine, "engine_facts", lambda: GOOD_ENGINE)  # the manager
    on_manager = run_main(*args, "--daemon-json", daemon_json, "--toolkit-config", toolkit)
    assert on_manager.code == (3 if trainer.startswith("GPU-") else 6)
