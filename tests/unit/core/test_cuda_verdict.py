"""cuda-check's verdict on the host: what the probe saw in a container, against its plan."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from drgpu import probe
from drgpu.core.cuda_verdict import judge, select
from drgpu.core.facts import ContainerFacts, DeviceRequestFacts, TaskFacts
from drgpu.core.swarm_view import task_stand_in
from drgpu.errors import ConfigError
from drgpu.ui.documents import cuda_check_document

GPU = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"


def container(driver: str) -> ContainerFacts:
    ids = (f"nvidia.com/gpu={GPU}",) if driver == "cdi" else (GPU,)
    return ContainerFacts(
        id="c1",
        name="deepracer-0-robomaker-1",
        service="robomaker",
        project="deepracer-0",
        state="running",
        labels={"drgpu.run_id": "0", "drgpu.gpus": GPU},
        device_requests=(DeviceRequestFacts(driver, ids, 0, ()),),
    )


def probe_output(visible: str) -> str:
    """The probe's report of a container that sees one GPU, NVIDIA_VISIBLE_DEVICES=visible."""
    gpu = {"index": 0, "uuid": GPU, "mig_mode": False, "mig_devices": [], "error": None}
    nvml = {"loaded": True, "available": True, "devices": [gpu], "device_count": 1}
    cuda = {"loaded": True, "available": True, "device_count": 1, "devices": [{"uuid": GPU}]}
    env: dict[str, str | None] = {"NVIDIA_VISIBLE_DEVICES": visible}
    report = {
        "environment": env,
        "nvml": nvml,
        "cuda": cuda,
        "findings": probe.visibility_findings(env, nvml, cuda),
        "gpu_injection": probe.gpu_injection(env, nvml, cuda),
        "expectations": {"met": True, "problems": []},
    }
    return json.dumps(report)


def test_a_cdi_container_that_sees_its_gpu_passes_and_says_how() -> None:
    result = judge(container("cdi"), 0, probe_output("void"))
    assert result.ok and result.injection == "cdi"
    assert not any("no GPU" in finding.message for finding in result.findings)
    assert cuda_check_document("deepracer-0", [result])["results"][0]["gpu_injection"] == "cdi"


def test_an_nvidia_request_served_through_cdi_is_said_not_failed() -> None:
    result = judge(container("nvidia"), 0, probe_output("void"))
    assert result.ok
    assert any("served its nvidia device request through CDI" in f.message for f in result.findings)
    runtime = judge(container("nvidia"), 0, probe_output(GPU))
    assert runtime.injection == "runtime"
    assert not any("through CDI" in f.message for f in runtime.findings)


def test_a_task_on_another_node_is_judged_as_its_container_would_be() -> None:
    """Its GPUs as the engine reserved them (engine's choice) or its slot's pinned entry,
    its slot as the replica and its node named, as for a task container on this node."""
    chosen = TaskFacts(
        "t2", "deepracer-7_robomaker", 2, "worker-node-id-1", "running", "running", "",
        generic_resources=(("NVIDIA-GPU", GPU),),
        labels={"drgpu.run_id": "7", "drgpu.swarm_gpus": "1"},
    )  # fmt: skip
    pinned = replace(chosen, labels={"drgpu.swarm_gpus": "1", "drgpu.gpus_by_slot": f"2={GPU}"})
    for task in (chosen, pinned):
        stand_in = task_stand_in("deepracer-7", task)
        assert stand_in.name == "deepracer-7_robomaker.2 on node worker-node-"
        assert stand_in.service == "robomaker"
        result = judge(stand_in, 0, probe_output(GPU))
        assert (result.expected, result.replica, result.node) == ((GPU,), "2", task.node_id)
        assert result.ok
    assert judge(container("nvidia"), 0, probe_output(GPU)).replica == "1"  # Compose's number


def test_a_simulator_named_checks_each_of_its_workers() -> None:
    def named(service: str, role: str) -> ContainerFacts:
        labels = {"drgpu.run_id": "0", "drgpu.gpus": GPU, "drgpu.role": role}
        return replace(container("nvidia"), service=service, labels=labels)

    workers = [named("robomaker-1", "simulator"), named("robomaker-2", "simulator")]
    stack = [named("rl_coach", "trainer-launcher"), *workers, named("redis-1", "other")]
    assert select(stack, "robomaker") == workers
    assert select(stack, "robomaker-2") == workers[1:]
    with pytest.raises(ConfigError, match="no service 'redis' in this stack"):
        select(stack, "redis")
