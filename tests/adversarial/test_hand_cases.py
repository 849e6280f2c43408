"""The reproducers of issue 12 (and the secrets of issue 10), each a clear error with a
documented exit code, or the right result; nothing the user wrote is changed."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drgpu.errors import ExitCode
from tests.adversarial.helpers import GTX_M40, SECRET, assert_sound, documented_exit_codes
from tests.support.runners import run_main

Write = Callable[..., Path]


pytestmark = pytest.mark.usefixtures("no_engine")


@pytest.fixture
def write(tmp_path: Path) -> Write:
    """`write(KEY=value, ...)`: a system.env holding the secret and these keys."""

    def settings(**values: str) -> Path:
        path = tmp_path / "system.env"
        lines = [f"AWS_SECRET_ACCESS_KEY={SECRET}", *(f"{k}={v}" for k, v in values.items())]
        path.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
        return path

    return settings


def inventory(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "inventory.json"
    path.write_text(text)
    return path


def plan(env: Path, inventory_file: Path = GTX_M40) -> Any:
    before = env.read_bytes()
    ran = run_main("plan", "--env-file", env, "--inventory", inventory_file)
    assert env.read_bytes() == before
    return ran


# --- bounds on every number, with the bound in the message --------------------------------


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("DR_SAGEMAKER_CUDA_DEVICES", "1" * 4301, "indices go from 0 to 1023"),
        ("DR_ROBOMAKER_CUDA_DEVICES", "0," + "9" * 5000, "indices go from 0 to 1023"),
        ("DR_SAGEMAKER_CUDA_DEVICES", "1024", "indices go from 0 to 1023"),
        ("DRGPU_MPS_SAGEMAKER_THREADS", "5" * 5000, "from 1 to 100"),
        ("DRGPU_MPS_ROBOMAKER_MEMORY", "9" * 5000 + "G", "from 1M to 1024G"),
        ("DR_WORKERS", "99999999999", "from 1 to 64"),
        ("DR_WORKERS", "1" * 5000, "from 1 to 64"),
        ("DR_RUN_ID", "a" * 300, "more than 64"),
        ("DRGPU_LOCK_TIMEOUT", "9" * 5000, "from 0 to 86400"),
    ],
)
def test_numbers_past_their_bound_are_config_errors_naming_it(
    write: Write, key: str, value: str, says: str
) -> None:
    env = write(**{"DR_SAGEMAKER_CUDA_DEVICES": "0", "DRGPU_SHARING": "mps", key: value})
    ran = plan(env) if key != "DRGPU_LOCK_TIMEOUT" else run_main("down", "--env-file", env)
    assert_sound(ran, ExitCode.CONFIG)
    assert says in ran.err
    assert len(ran.err) < 400  # the value is cut short, not echoed whole


def test_a_thousand_workers_are_refused_at_once(write: Write) -> None:
    ran = plan(write(DR_ROBOMAKER_CUDA_DEVICES="0", DR_WORKERS="100000"))
    assert_sound(ran, ExitCode.CONFIG)


@pytest.mark.parametrize("command", ["plan", "up", "down"])
def test_a_nul_byte_in_a_value_is_a_config_error(write: Write, command: str) -> None:
    env = write(DR_SAGEMAKER_CUDA_DEVICES="0", DR_SIMAPP_NAME="a\x00b")
    args = ["--inventory", str(GTX_M40)] if command == "plan" else []
    assert_sound(run_main(command, "--env-file", env, *args), ExitCode.CONFIG)


# --- inventories ----------------------------------------------------------------------------


def _gpu(**extra: Any) -> dict[str, Any]:
    return {
        "uuid": "GPU-11111111-2222-3333-4444-555555555555",
        "name": "T",
        "pci_bus_id": "01:00.0",
        "memory_total_mib": 1024,
        **extra,
    }


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            '{"gpus": [{"uuid": "GPU-a", "pci_bus_id": "01:00.0", "memory_total_mib": Infinity}]}',
            "Infinity",
        ),
        ('{"gpus": [], "cuda_driver_version": NaN}', "NaN"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"gpus": [{"memory_total_mib": ' + "1" * 5000 + "}]}", "not valid JSON"),
        (json.dumps({"gpus": [_gpu(mig_mode="false")]}), "mig_mode 'false' is not true or false"),
        (json.dumps({"gpus": [_gpu(memory_total_mib=-1)]}), "from 0 to"),
        (json.dumps({"gpus": [_gpu(memory_used_mib=2**80)]}), "from 0 to"),
        (json.dumps({"gpus": [_gpu(), _gpu(pci_bus_id="02:00.0")]}), "two GPUs have the UUID"),
        (
            json.dumps({"gpus": [_gpu(), _gpu(uuid="GPU-99999999-2222-3333-4444-555555555555")]}),
            "two GPUs have the PCI bus id",
        ),
        (json.dumps({"gpus": [_gpu(index=True)]}), "index True"),
        (json.dumps({"gpus": [_gpu(processes=[{"pid": -4}])]}), "pid -4"),
    ],
)
def test_bad_inventories_are_config_errors(
    write: Write, tmp_path: Path, text: str, says: str
) -> None:
    ran = plan(write(DR_SAGEMAKER_CUDA_DEVICES="0"), inventory(tmp_path, text))
    assert_sound(ran, ExitCode.CONFIG)
    assert says in ran.err


def test_a_lost_gpu_without_a_bus_id_reads_well(write: Write, tmp_path: Path) -> None:
    lost = {"gpus": [_gpu(), {"index": 1, "uuid": "", "error": "gpu_is_lost"}]}
    ran = plan(write(DR_SAGEMAKER_CUDA_DEVICES="1"), inventory(tmp_path, json.dumps(lost)))
    assert_sound(ran, ExitCode.GPU_VALIDATION)
    assert "GPU 1 (bus id unknown) is lost" in ran.err
    assert "()" not in ran.err


# --- the .drgpu folder, the settings folder, DRGPU_COMPOSE ----------------------------------


@pytest.mark.parametrize("command", ["up", "down"])
def test_a_drgpu_symlink_is_never_followed(write: Write, tmp_path: Path, command: str) -> None:
    elsewhere = tmp_path / "someone-else"
    elsewhere.mkdir()
    (tmp_path / ".drgpu").symlink_to(elsewhere)
    ran = run_main(command, "--env-file", write(DR_SAGEMAKER_CUDA_DEVICES="none"))
    assert_sound(ran, ExitCode.CONFIG)
    assert "is a symbolic link" in ran.err
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("command", ["up", "down"])
def test_a_drgpu_regular_file_is_a_config_error(write: Write, tmp_path: Path, command: str) -> None:
    (tmp_path / ".drgpu").write_text("mine\n")
    ran = run_main(command, "--env-file", write(DR_SAGEMAKER_CUDA_DEVICES="none"))
    assert_sound(ran, ExitCode.CONFIG)
    assert "is not a folder" in ran.err
    assert (tmp_path / ".drgpu").read_text() == "mine\n"


def test_a_read_only_settings_folder_is_a_config_error(
    write: Write, monkeypatch: pytest.MonkeyPatch
) -> None:
    def read_only(self: Path, mode: int = 0o777, *args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    env = write(DR_SAGEMAKER_CUDA_DEVICES="none")
    monkeypatch.setattr(Path, "mkdir", read_only)
    ran = run_main("up", "--env-file", env)
    assert_sound(ran, ExitCode.CONFIG)
    assert "Read-only file system" in ran.err


@pytest.mark.parametrize(
    ("compose", "says"),
    [(" ", "DRGPU_COMPOSE is blank"), ("'unclosed", "DRGPU_COMPOSE: No closing quotation")],
)
def test_a_blank_or_broken_compose_command_is_a_config_error(
    write: Write, compose: str, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRGPU_COMPOSE", compose)
    ran = run_main("down", "--env-file", write())
    assert_sound(ran, ExitCode.CONFIG)
    assert says in ran.err


def test_a_compose_that_is_not_executable_is_a_config_error(
    write: Write, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compose = tmp_path / "compose"
    compose.write_text("#!/bin/sh\n")
    compose.chmod(0o644)
    monkeypatch.setenv("DRGPU_COMPOSE", str(compose))
    ran = run_main("down", "--env-file", write())
    assert_sound(ran, ExitCode.CONFIG)
    assert "is not executable" in ran.err


# --- no secret is ever printed --------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("plan", "--inventory", str(GTX_M40)),
        ("plan", "--json", "--inventory", str(GTX_M40)),
        ("render", "--inventory", str(GTX_M40)),
        ("doctor", "--json"),
        ("doctor",),
        ("down",),
    ],
)
def test_no_output_shows_a_secret(write: Write, args: tuple[str, ...]) -> None:
    env = write(DR_SAGEMAKER_CUDA_DEVICES="0", MY_API_TOKEN=SECRET + "-token")
    ran = run_main(args[0], "--env-file", env, *args[1:])
    assert SECRET not in ran.out + ran.err
    assert "Traceback" not in ran.err


@pytest.mark.parametrize(
    "values",
    [
        {"DR_SAGEMAKER_CUDA_DEVICES": "${AWS_SECRET_ACCESS_KEY}"},  # an error quoting it
        {"DR_WORKERS": "${AWS_SECRET_ACCESS_KEY}"},
        {"DRGPU_SHARING": "${AWS_SECRET_ACCESS_KEY}"},
    ],
)
def test_an_error_about_a_secret_value_masks_it(write: Write, values: dict[str, str]) -> None:
    ran = plan(write(**values))
    assert_sound(ran, ExitCode.CONFIG)
    assert "****" in ran.err


def test_a_compose_command_named_by_a_secret_is_masked_in_the_error(
    write: Write, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DRGPU_COMPOSE")
    ran = run_main("down", "--env-file", write(DRGPU_COMPOSE=f"/nowhere/{SECRET}"))
    assert_sound(ran, ExitCode.CONFIG)
    assert "****" in ran.err


# --- exit codes -----------------------------------------------------------------------------


def test_every_exit_code_is_documented() -> None:
    assert {int(code) for code in ExitCode} == documented_exit_codes()
    assert {int(ExitCode.HANGUP), int(ExitCode.INTERRUPTED), int(ExitCode.TERMINATED)} == {
        129,
        130,
        143,
    }
