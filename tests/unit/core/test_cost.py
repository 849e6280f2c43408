"""GPU cost per run, service and worker (core.cost), its file (host.cost_file) and
`drgpu report`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from drgpu.core import cost
from drgpu.core.cost import Usage, by_service, charge, energies
from drgpu.core.facts import ContainerFacts, NodeFacts, TaskFacts
from drgpu.core.gpu_usage import build_status
from drgpu.core.model import Gpu, GpuHealth, GpuProcess, Inventory
from drgpu.core.swarm_view import SwarmState
from drgpu.host.cost_file import CostKeeper, ledger_path, read_ledger
from tests.support.runners import Cli
from tests.unit.core.test_faults import G0, G1, TRAINER

GPU0 = Gpu(0, G0, "Tesla T4", "00000000:00:00.0", 15360, utilization_gpu_percent=50)
GPU1 = Gpu(1, G1, "Tesla T4", "00000000:01:00.0", 15360, utilization_gpu_percent=100)
SIMULATORS = [
    ContainerFacts(
        id=f"{n}" * 64,
        name=f"deepracer-0-robomaker-{n}",
        service="robomaker",
        project="deepracer-0",
        state="running",
        labels={"drgpu.run_id": "0", "drgpu.gpus": G1, "drgpu.role": "simulator"},
    )
    for n in (1, 2)
]
CGROUP = f"0::/docker/{TRAINER.id}\n"
STATUS = build_status(
    Inventory(gpus=(replace(GPU0, processes=(GpuProcess(7, 900),)), GPU1)),
    [TRAINER, *SIMULATORS],
    [],
    {7: CGROUP},
)


def test_each_refresh_is_charged_to_the_holders_of_each_gpu() -> None:
    before = {G0: 1_000_000, G1: 2_000_000}
    health = [GpuHealth(0, G0, energy_mj=1_100_000, throttle=0x40), GpuHealth(1, G1, 2_060_000)]
    ledger = charge({}, STATUS, health, before, 2.0, 1000.0)
    trainer = ledger[("0", "sagemaker", TRAINER.name)]
    assert trainer == Usage(2.0, 100.0, 900, 1.0, 2.0, 1000.0, 1000.0, 2.0)
    assert trainer.mean_utilization == 50
    idle = charge(
        {},
        replace(STATUS, inventory=Inventory(gpus=(replace(GPU0, utilization_gpu_percent=0),))),
        health,
        before,
        2.0,
        1000.0,
    )
    assert idle[("0", "sagemaker", TRAINER.name)].mean_utilization == 0  # measured idle
    unread = replace(GPU0, utilization_gpu_percent=None)
    blind = charge(
        {}, replace(STATUS, inventory=Inventory(gpus=(unread,))), health, before, 2.0, 1000.0
    )
    assert blind[("0", "sagemaker", TRAINER.name)].mean_utilization is None  # never read
    worker = ledger[("0", "robomaker", "deepracer-0-robomaker-1")]
    assert (worker.energy_j, worker.busy_seconds, worker.throttled_seconds) == (30.0, 2.0, 0.0)
    services = by_service(ledger, "0")
    assert services["robomaker"].gpu_seconds == 4.0 and services["robomaker"].energy_j == 60.0
    # a counter that went back (the driver reloaded) adds no energy; time still counts
    again = charge(ledger, STATUS, health, {G0: 5_000_000}, 1.0, 1001.0)
    assert again[("0", "sagemaker", TRAINER.name)].energy_j == 100.0
    assert again[("0", "sagemaker", TRAINER.name)].gpu_seconds == 3.0
    assert energies(health) == {G0: 1_100_000, G1: 2_060_000}
    names = {s.metric.name for s in cost.samples(ledger)}
    assert "drgpu_cost_energy_joules" in names and "drgpu_cost_throttled_seconds" in names


def test_a_sagemaker_trainers_memory_is_its_rl_coachs() -> None:
    coach = replace(
        TRAINER,
        id="c" * 64,
        name="deepracer-0-rl_coach-1",
        service="rl_coach",
        labels={"drgpu.run_id": "0", "drgpu.role": "trainer-launcher", "drgpu.forwarded_gpus": G0},
    )
    trainer = ContainerFacts(
        "d" * 64, "tmpqbaos4kg-algo-1-x7k2p-1", "algo-1-x7k2p", "tmp", "running"
    )
    inventory = Inventory(gpus=(replace(GPU0, processes=(GpuProcess(8, 700),)),))
    status = build_status(inventory, [coach], [trainer], {8: f"0::/docker/{trainer.id}\n"})
    ledger = charge({}, status, (), {}, 1.0, 1000.0)
    assert list(ledger) == [("0", "rl_coach", coach.name)]
    assert ledger[("0", "rl_coach", coach.name)].peak_memory_mib == 700


def test_the_ledger_keeps_the_runs_seen_last() -> None:
    ledger = {(str(n), "s", "c"): Usage(1.0, last_seen=float(n)) for n in range(cost.MAX_RUNS + 5)}
    kept = charge(ledger, STATUS, (), {}, 0.0, 0.0)
    assert len({run for run, _, _ in kept}) == cost.MAX_RUNS
    assert ("0", "s", "c") not in kept and ("204", "s", "c") in kept


def test_the_file_survives_a_restart_and_report_reads_it(cli: Cli, tmp_path: Path) -> None:
    path = ledger_path(tmp_path / "system.env")
    keeper = CostKeeper(path, 1.0, print)
    keeper.charge(STATUS, [GpuHealth(0, G0, energy_mj=1000)])
    keeper.charge(STATUS, [GpuHealth(0, G0, energy_mj=4600)])
    keeper.save()
    assert path.read_text().startswith("# Written by drgpu")
    restarted = CostKeeper(path, 1.0, print)
    assert restarted.ledger == read_ledger(path) and restarted.ledger
    assert restarted.ledger[("0", "sagemaker", TRAINER.name)].energy_j == 3.6

    shown = cli("report", "--run", "0", "--json")
    assert shown.code == 0, shown.err
    run = json.loads(shown.out)["runs"][0]
    assert [s["service"] for s in run["services"]] == ["robomaker", "sagemaker"]
    assert {w["container"] for w in run["workers"]} >= {"deepracer-0-robomaker-1"}
    table = cli("report")
    assert table.code == 0 and "GPU cost of run 0" in table.out and "sagemaker" in table.out
    missing = cli("report", "--run", "9")
    assert missing.code == 2 and "no GPU cost kept for run 9" in missing.err


def test_a_watch_on_a_swarm_manager_says_once_that_other_nodes_are_not_charged() -> None:
    here, there = (
        NodeFacts("m", "box", "manager", "ready"),
        NodeFacts("w", "gpu2", "worker", "ready"),
    )
    task = TaskFacts("t", "deepracer-0_robomaker", 1, there.id, "running", "running", "")
    swarm = SwarmState((here, there), (task,), (here.id,), here=here.id)
    said: list[str] = []
    keeper = CostKeeper(None, 1.0, said.append)
    for _ in range(2):
        keeper.charge(replace(STATUS, swarm=swarm), [])
    assert said == [
        "GPU cost counts this node's GPUs: 1 task(s) on other nodes are not in `drgpu report`"
        " (a watch on each node keeps its own)"
    ]
