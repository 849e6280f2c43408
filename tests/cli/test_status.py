"""`drgpu status` through drgpu's own main, with the gathering replaced (no NVML, no
engine): what reaches stdout and stderr, and the exit codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from drgpu.commands import status
from drgpu.core import gpu_usage
from drgpu.core.facts import ContainerFacts
from drgpu.core.model import Gpu, GpuProcess, Inventory
from drgpu.errors import NvmlUnavailableError
from drgpu.host import docker_api, nvml
from tests.support.runners import Cli

G0 = "GPU-00000000-0000-4000-8000-000000000000"
TRAINER_ID = "a" * 64


@contextmanager
def fake_session() -> Iterator[Any]:
    yield object()


def a_status(pid_gpu: str) -> gpu_usage.Status:
    trainer = ContainerFacts(
        id=TRAINER_ID,
        name="deepracer-0-sagemaker-1",
        service="sagemaker",
        project="deepracer-0",
        state="running",
        labels={"drgpu.run_id": "0", "drgpu.gpus": pid_gpu, "drgpu.role": "trainer"},
    )
    gpu = Gpu(
        index=0,
        uuid=G0,
        name="Tesla T4",
        pci_bus_id="00000000:01:00.0",
        memory_total_mib=15360,
        processes=(GpuProcess(1234, 900),),
    )
    cgroups: dict[int, str | None] = {1234: f"0::/docker/{TRAINER_ID}\n"}
    return gpu_usage.build_status(Inventory(gpus=(gpu,)), [trainer], [], cgroups)


@pytest.fixture
def snapshots(monkeypatch: pytest.MonkeyPatch) -> list[gpu_usage.Status]:
    """Each snapshot the CLI takes pops the next of this list (the last one repeats)."""
    queue: list[gpu_usage.Status] = []

    class Reader:
        health = ()  # no GPU health: nothing is charged but time

        def __init__(self, session: Any, engine: Any, run_id: str | None = None, *_: Any) -> None:
            pass

        def snapshot(self) -> gpu_usage.Status:
            return queue.pop(0) if len(queue) > 1 else queue[0]

    monkeypatch.setattr(nvml, "nvml_session", fake_session)
    monkeypatch.setattr(docker_api, "connected", fake_session)
    monkeypatch.setattr(status, "Reader", Reader)
    monkeypatch.setattr(nvml, "EventFollower", lambda session: None)  # no NVML events here
    return queue


def test_status_ok_prints_the_boards_lines_and_exits_zero(cli: Cli, snapshots: list[Any]) -> None:
    snapshots.append(a_status(G0))
    code, out, err = cli("status")
    assert (code, err) == (0, "")
    gpu, process, end = (line.split(" ", 1)[1] for line in out.splitlines())
    assert gpu.startswith("GPU 0 Tesla T4")
    assert process == "  - run 0 · trainer · sagemaker pid 1234 900 MiB"
    assert end == "0 violation(s)"


def test_status_violation_exits_6_with_the_json_on_stdout(cli: Cli, snapshots: list[Any]) -> None:
    snapshots.append(a_status("GPU-somewhere-else"))
    code, out, err = cli("status", "--json")
    assert code == 6
    document = json.loads(out)
    assert document["ok"] is False
    assert [v["kind"] for v in document["findings"]] == ["wrong-gpu", "missing-gpu"]
    assert err.startswith("drgpu: error: PID 1234 of run 0 service sagemaker")
    assert err.count("\n") == 1


def test_status_watch_json_prints_one_line_per_refresh(cli: Cli, snapshots: list[Any]) -> None:
    snapshots.extend([a_status(G0), a_status(G0), a_status("GPU-elsewhere")])
    code, out, _ = cli("status", "--watch", "--json", "--count", "3", "--interval", "0.1")
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["ok"] for line in lines] == [True, True, False]
    assert code == 6  # the last refresh decides


def test_status_without_nvml_exits_4(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    @contextmanager
    def no_nvml() -> Iterator[Any]:
        raise NvmlUnavailableError("the NVIDIA driver is installed but not loaded", hint="modprobe")
        yield

    monkeypatch.setattr(nvml, "nvml_session", no_nvml)
    code, out, err = cli("status")
    assert (code, out) == (4, "")
    assert err == "drgpu: error: the NVIDIA driver is installed but not loaded\n  hint: modprobe\n"


@pytest.mark.parametrize("args", [["--interval", "0"], ["--count", "0"]])
def test_status_rejects_bad_numbers_with_exit_2(cli: Cli, args: list[str]) -> None:
    code, _, err = cli("status", "--watch", *args)
    assert code == 2
    assert err.startswith("drgpu: error: ")


def test_status_with_no_drgpu_container_shows_the_gpus_alone(
    cli: Cli, snapshots: list[Any]
) -> None:
    gpu = Gpu(index=0, uuid=G0, name="Tesla T4", pci_bus_id="00000000:01:00.0", memory_total_mib=1)
    snapshots.append(gpu_usage.build_status(Inventory(gpus=(gpu,)), [], [], {}))
    code, out, err = cli("status")
    assert (code, err) == (0, "")
    assert [line.split(" ", 1)[1] for line in out.splitlines()] == [
        "GPU 0 Tesla T4 util n/a mem 0/1 MiB",
        "0 violation(s)",
    ]


def test_processes_nvml_cannot_list_are_a_warning_not_exit_6(
    cli: Cli, snapshots: list[Any]
) -> None:
    gpu = Gpu(
        index=0,
        uuid=G0,
        name="Tesla T4",
        pci_bus_id="00000000:01:00.0",
        memory_total_mib=1,
        processes_unknown="compute processes: Unknown Error",
    )
    snapshots.append(gpu_usage.build_status(Inventory(gpus=(gpu,)), [], [], {}))
    code, out, err = cli("status")
    assert (code, err) == (0, "")
    assert "WARNING: status cannot list processes on GPU 0 (Tesla T4)" in " ".join(out.split())
    code, out, _ = cli("status", "--json")
    assert code == 0 and json.loads(out)["ok"] is False
