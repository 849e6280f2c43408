"""Several runs on one host: labels, claims read back from them, conflicts, the host lock."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from drgpu.core.compose_stack import Stack, base_stack_file, load_stack
from drgpu.core.labels import claims, run_labels
from drgpu.core.model import Claim, Inventory, Role
from drgpu.core.planning import RUNS_HINT, make_plan
from drgpu.core.settings import Config
from drgpu.errors import DockerError, ExitCode, GpuValidationError
from drgpu.host import engine
from tests.plan_warnings import order_free

MakeConfig = Callable[..., Config]

M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"  # gtx_m40 index 0
GTX1650 = "GPU-3b1d9c52-7a4e-4f0b-8c6d-2e9f1a7b5c30"  # gtx_m40 index 1
A100_MIG_1 = "MIG-a1000000-0000-4000-8000-0000000000a1"
A100_MIG_2 = "MIG-a1000000-0000-4000-8000-0000000000a2"


@pytest.fixture
def base_stack() -> Stack:
    return load_stack([base_stack_file()])


# --- labels and claims -----------------------------------------------------------------------


def test_labels_say_gpus_role_run_and_non_exclusive_sharing() -> None:
    assert run_labels("a", "exclusive", Role.TRAINER, M40) == (
        ("drgpu.gpus", M40),
        ("drgpu.role", "trainer"),
        ("drgpu.run_id", "a"),
    )
    assert run_labels("a", "timeslice", Role.TRAINER_LAUNCHER, "", forwarded=M40) == (
        ("drgpu.forwarded_gpus", M40),
        ("drgpu.gpus", ""),
        ("drgpu.role", "trainer-launcher"),
        ("drgpu.run_id", "a"),
        ("drgpu.sharing", "timeslice"),
    )


def test_claims_come_from_live_containers_labels() -> None:
    service = "com.docker.compose.service"
    found = claims(
        [
            ("running", {"drgpu.run_id": "a", "drgpu.gpus": f"{M40},{GTX1650}", service: "x"}),
            ("running", {"drgpu.run_id": "b", "drgpu.gpus": "", "drgpu.forwarded_gpus": M40}),
            ("created", {"drgpu.run_id": "c", "drgpu.gpus": M40, "drgpu.sharing": "timeslice"}),
            ("exited", {"drgpu.run_id": "d", "drgpu.gpus": M40}),
            ("running", {"drgpu.run_id": "e", "drgpu.gpus": ""}),
            ("running", {"drgpu.gpus": M40}),
        ]
    )
    assert found == (
        Claim("a", "x", (M40, GTX1650)),
        Claim("b", "?", (M40,)),
        Claim("c", "?", (M40,), sharing="timeslice"),
    )


# --- conflicts with other runs ---------------------------------------------------------------


def test_exclusive_refuses_a_gpu_another_run_holds_and_names_it(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_RUN_ID="b", DR_SAGEMAKER_CUDA_DEVICES="0")
    with pytest.raises(GpuValidationError) as caught:
        make_plan(config, base_stack, gtx_m40, [Claim("a", "sagemaker", (M40,))])
    assert caught.value.exit_code is ExitCode.GPU_VALIDATION
    assert caught.value.problems == [
        "0: Tesla M40 24GB (22912 MiB, 00000000:03:00.0), planned for sagemaker, is held by"
        " run 'a' (sagemaker); DRGPU_SHARING=exclusive does not share GPUs between runs"
    ]
    assert caught.value.hint == RUNS_HINT


def test_a_runs_own_claims_are_no_conflict(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_RUN_ID="a", DR_SAGEMAKER_CUDA_DEVICES="0")
    plan = make_plan(config, base_stack, gtx_m40, [Claim("a", "sagemaker", (M40,))])
    assert order_free(plan.warnings) == ()


def test_two_timeslice_runs_share_with_a_warning(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_RUN_ID="b", DR_SAGEMAKER_CUDA_DEVICES="0", DRGPU_SHARING="timeslice")
    held = [Claim("a", "sagemaker", (M40,), sharing="timeslice")]
    plan = make_plan(config, base_stack, gtx_m40, held)
    assert plan.warnings[-1].endswith(
        "is held by run 'a' (sagemaker); both runs use DRGPU_SHARING=timeslice: shared"
    )


def test_timeslice_does_not_take_a_gpu_from_an_exclusive_run(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_RUN_ID="b", DR_SAGEMAKER_CUDA_DEVICES="0", DRGPU_SHARING="timeslice")
    with pytest.raises(GpuValidationError) as caught:
        make_plan(config, base_stack, gtx_m40, [Claim("a", "robomaker-2", (M40,))])
    assert caught.value.problems[0].endswith(
        "is held by run 'a' (robomaker-2), which does not share it (DRGPU_SHARING=exclusive there)"
    )


def test_mps_does_not_share_gpus_between_runs(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_RUN_ID="b", DR_SAGEMAKER_CUDA_DEVICES="0", DRGPU_SHARING="mps")
    held = [Claim("a", "sagemaker", (M40,), sharing="mps")]
    with pytest.raises(GpuValidationError, match="DRGPU_SHARING=mps does not share GPUs"):
        make_plan(config, base_stack, gtx_m40, held)


def test_mig_slices_conflict_with_their_whole_gpu_but_not_with_each_other(
    make_config: MakeConfig, base_stack: Stack, mig_l4: Inventory
) -> None:
    config = make_config(DR_RUN_ID="b", DR_SAGEMAKER_CUDA_DEVICES=A100_MIG_2)
    make_plan(config, base_stack, mig_l4, [Claim("a", "sagemaker", (A100_MIG_1,))])
    with pytest.raises(GpuValidationError):
        make_plan(
            config,
            base_stack,
            mig_l4,
            [Claim("a", "x", ("GPU-a1000000-0000-4000-8000-000000000001",))],
        )


def test_every_held_gpu_is_reported_once_per_run(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(
        DR_RUN_ID="c", DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1", DR_WORKERS="2"
    )
    held = [
        Claim("a", "sagemaker", (M40,)),
        Claim("a", "robomaker", (M40,)),
        Claim("b", "robomaker-1", (GTX1650,)),
    ]
    with pytest.raises(GpuValidationError) as caught:
        make_plan(config, base_stack, gtx_m40, held)
    assert [p.split(" is held by ")[1][:7] for p in caught.value.problems] == ["run 'a'", "run 'b'"]
    assert "(sagemaker, robomaker)" in caught.value.problems[0]
    assert "planned for robomaker-1, robomaker-2" in caught.value.problems[1]


def test_rl_coachs_forwarded_trainer_gpu_counts_as_held(
    make_config: MakeConfig, write_stack: Callable[[str], Stack], gtx_m40: Inventory
) -> None:
    stack = write_stack("services:\n  rl_coach: {}\n")
    config = make_config(DR_RUN_ID="b", DR_SAGEMAKER_CUDA_DEVICES="0")
    with pytest.raises(GpuValidationError, match="planned for rl_coach, is held by run 'a'"):
        make_plan(config, stack, gtx_m40, [Claim("a", "rl_coach", (M40,))])


def test_auto_picks_around_what_other_runs_hold(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_RUN_ID="b", DR_SAGEMAKER_CUDA_DEVICES="auto")
    plan = make_plan(config, base_stack, gtx_m40, [Claim("a", "sagemaker", (M40,))])
    assert [d.uuid for d in plan.service("sagemaker").devices] == [GTX1650]
    assert plan.explanations[0].endswith("passed over GPU 0 (held by run 'a')")


# --- the engine's listing over its socket ----------------------------------------------------


def answer(status: str, body: object) -> bytes:
    data = json.dumps(body).encode()
    return f"HTTP/1.0 {status}\r\nContent-Type: application/json\r\n\r\n".encode() + data


def serve_once(path: Path, reply: bytes) -> tuple[threading.Thread, list[bytes]]:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    seen: list[bytes] = []

    def run() -> None:
        connection, _ = server.accept()
        with connection:
            seen.append(connection.recv(65536))
            connection.sendall(reply)
        server.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, seen


def test_drgpu_labels_asks_the_engine_on_its_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "d.sock"
    listing = [{"State": "running", "Labels": {"drgpu.run_id": "a", "drgpu.gpus": M40}}]
    thread, seen = serve_once(path, answer("200 OK", listing))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    assert engine.drgpu_labels() == [("running", {"drgpu.run_id": "a", "drgpu.gpus": M40})]
    thread.join(5)
    request = seen[0].decode()
    assert request.startswith("GET /containers/json?all=1&filters=")
    assert "drgpu.run_id" in request.replace("%22", '"').replace("%2E", ".")


def test_drgpu_labels_turns_an_engine_error_into_a_docker_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "d.sock"
    thread, _ = serve_once(path, answer("500 Internal Server Error", {"message": "boom"}))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    with pytest.raises(DockerError, match=r"refused to list containers: boom"):
        engine.drgpu_labels()
    thread.join(5)


def test_drgpu_labels_without_an_engine_is_a_docker_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    with pytest.raises(DockerError, match=r"cannot reach the Docker engine at .*absent\.sock"):
        engine.drgpu_labels()


def test_a_swarm_task_the_engine_chose_gpus_for_claims_them() -> None:
    from drgpu.core.labels import engine_chosen, with_engine_choice

    reserving = {"drgpu.run_id": "g", "drgpu.gpus": "", "drgpu.swarm_gpus": "1"}
    pinned = {"drgpu.run_id": "p", "drgpu.gpus": M40, "drgpu.swarm_gpus": "1"}
    environment = {"DOCKER_RESOURCE_NVIDIA-GPU": GTX1650}

    assert engine_chosen(reserving) and not engine_chosen(pinned)
    held = claims([("running", with_engine_choice(reserving, environment)), ("running", pinned)])
    assert [(claim.run_id, claim.uuids) for claim in held] == [("g", (GTX1650,)), ("p", (M40,))]
