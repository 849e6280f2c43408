"""`drgpu cuda-check --all` of a DRfC run whose rl_coach stopped is refused (exit 5), as for
a stopped simulator: its SageMaker trainer is checked through it, and would go unchecked."""

from __future__ import annotations

import json

import pytest

from drgpu.core.facts import ContainerFacts
from tests.support.runners import Cli

G0 = "GPU-00000000-0000-4000-8000-000000000000"
G1 = "GPU-11111111-1111-4111-8111-111111111111"
ROBOMAKER = ContainerFacts(
    id="r" * 64,
    name="deepracer-0-robomaker-1",
    service="robomaker",
    project="deepracer-0",
    state="running",
    labels={"drgpu.run_id": "0", "drgpu.gpus": G1, "drgpu.role": "simulator"},
)
COACH = ContainerFacts(
    id="c" * 64,
    name="deepracer-0-rl_coach-1",
    service="rl_coach",
    project="deepracer-0",
    state="exited",
    labels={"drgpu.run_id": "0", "drgpu.forwarded_gpus": G0, "drgpu.role": "trainer-launcher"},
    exit_code=137,
)


def test_cuda_check_all_refuses_a_run_whose_rl_coach_stopped(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    def probe_in(container: ContainerFacts, arguments: list[str]) -> tuple[int, str]:
        seen = {"devices": [{"uuid": G1}]}
        return 0, json.dumps({"expectations": {"met": True}, "nvml": seen, "cuda": seen})

    monkeypatch.setattr("drgpu.commands.cuda_check.probe_in", probe_in)
    monkeypatch.setattr("drgpu.host.swarm_engine.managed_tasks", lambda name: None)
    monkeypatch.setattr("drgpu.host.engine.project_containers", lambda name: [ROBOMAKER, COACH])
    refused = cli("cuda-check", "--all", "--run-id", "0")
    assert refused.code == 5
    assert f"{COACH.name} is exited, not running" in refused.err
    # one service is checked on its own
    assert cli("cuda-check", "--service", "robomaker", "--run-id", "0").code == 0
