"""The input reproducers of issue 23 (defects 3, 4, 5, 8, 9, 10), each through drgpu's own
main: a clear error with a documented exit code, or the right result; no secret shown,
not even escaped; nothing the user wrote is changed."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drgpu.errors import ExitCode
from tests.adversarial.helpers import GTX_M40, SECRET, assert_sound
from tests.support.runners import Result, run_main

Write = Callable[..., Path]
M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"


@pytest.fixture(autouse=True)
def no_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Docker engine: only drgpu's own checks run (Compose is the real one)."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("DRGPU_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def write(tmp_path: Path) -> Write:
    """`write("LINE", ...)`: a system.env of these lines, the secret's line first."""

    def settings(*lines: str, raw: bytes = b"") -> Path:
        path = tmp_path / "system.env"
        text = "\n".join([f"AWS_SECRET_ACCESS_KEY={SECRET}", *lines]) + "\n"
        path.write_bytes(text.encode() + raw)
        return path

    return settings


def plan(env: Path, *args: str | Path) -> Result:
    before = env.read_bytes()
    ran = run_main("plan", "--env-file", env, "--inventory", GTX_M40, *args)
    assert env.read_bytes() == before
    return ran


# --- 3. a malformed secret line is never echoed --------------------------------------------

WJALR = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq9Q8w0v"


@pytest.mark.parametrize(
    "line",
    [
        f"AWS_SECRET_ACCESS_KEY={WJALR[:18]} {WJALR[18:]}",
        "MY_API_TOKEN=abcdEFGH12345678==",
        f"DR_LOCAL_S3_PASSWORD='{WJALR}",
        f"export GITHUB_TOKEN={WJALR};",
    ],
)
def test_a_malformed_secret_line_is_named_never_shown(tmp_path: Path, line: str) -> None:
    env = tmp_path / "system.env"
    env.write_text(f"DR_RUN_ID=1\n{line}\n")
    ran = plan(env)
    assert_sound(ran, ExitCode.CONFIG)
    assert f"{env}:2: " in ran.err
    value = line.split("=", 1)[1]
    for chunk in (value[i : i + 5] for i in range(len(value) - 4)):
        assert chunk not in ran.err, chunk


# --- 4. a secret under another name, non-ASCII, masked before YAML escapes it -------------

PASSWORD = "p\u00e4ssw\u00f6rd98765"


@pytest.mark.parametrize("target", ["--swarm", "--k8s", "--k8s --dra", ""])
def test_a_non_ascii_secret_passed_on_is_masked_in_every_rendering(
    tmp_path: Path, target: str
) -> None:
    compose = tmp_path / "docker-compose.yml"
    compose.write_text(
        "services:\n  sagemaker:\n    image: t:1\n    environment:\n"
        "      PASS_ON: ${DR_LOCAL_S3_PASSWORD}\n"
        "      URL: s3://racer:${DR_LOCAL_S3_PASSWORD}@minio\n"
        "    command: [run, --password, '${DR_LOCAL_S3_PASSWORD}']\n"
    )
    env = tmp_path / "system.env"
    env.write_text(
        f"DR_LOCAL_S3_PASSWORD={PASSWORD}\nDR_SAGEMAKER_CUDA_DEVICES=0\nDR_ROBOMAKER_CUDA_DEVICES=\n"
    )
    args: list[str | Path] = ["render", *target.split(), "--env-file", env]
    args += ["--inventory", GTX_M40, "-f", compose]
    ran = run_main(*args)
    assert_sound(ran, ExitCode.OK)
    shown = ran.out + ran.err
    assert "98765" not in shown
    assert PASSWORD not in shown
    assert not any(escape in shown.lower() for escape in ("\\xe4", "\\xf6", "\\u00e4"))
    if target:  # the stack or manifests carry the stack's settings (the override does not)
        written = tmp_path / "out.yml"
        assert run_main(*args, "-o", written).code == 0
        assert "rd98765" in written.read_text()


# --- 5. carriage returns -------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [b"DR_RUN_ID=a\rDR_WORKERS=3\n", b"DR_WORKERS=2\r\n", b"# note\r\n", b"\r\n"],
)
def test_a_carriage_return_is_refused_with_its_line(write: Write, raw: bytes) -> None:
    env = write("DR_SAGEMAKER_CUDA_DEVICES=0", raw=raw)
    ran = plan(env)
    assert_sound(ran, ExitCode.CONFIG)
    assert f"{env}:3: a carriage return" in ran.err


# --- 8. exit 1 no more -----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["plan", "render", "down", "doctor", "up"])
def test_a_settings_file_name_too_long_is_a_config_error(command: str) -> None:
    ran = run_main(command, "--env-file", "n" * 300)
    assert ran.code in (ExitCode.CONFIG, ExitCode.CHECK_FAILED), ran.err
    assert_sound(ran, ExitCode.CONFIG, ExitCode.CHECK_FAILED)
    assert "unexpected" not in ran.err


@pytest.mark.parametrize("value", ["\u00b2", "\u0663", "\u0969", "1\u00b2", "+3"])
def test_a_lock_timeout_in_other_digits_is_a_config_error(write: Write, value: str) -> None:
    ran = run_main("down", "--env-file", write(f"DRGPU_LOCK_TIMEOUT={value}"))
    assert_sound(ran, ExitCode.CONFIG)
    assert "DRGPU_LOCK_TIMEOUT" in ran.err


@pytest.mark.parametrize("interval", ["inf", "-inf", "1e308", "nan", "NaN", "0", "86401"])
def test_an_interval_must_be_finite_positive_and_bounded(interval: str) -> None:
    ran = run_main("status", "--watch", "--count", "1", "--interval", interval)
    assert_sound(ran, ExitCode.CONFIG)
    assert "--interval" in ran.err


# --- 9. UUIDs that would be code in CEL or a Go template -----------------------------------


@pytest.mark.parametrize("uuid", ['GPU-x" || true || "x', "}}{{", "GPU-{{.Node.ID}}", "GPU-$X"])
@pytest.mark.parametrize("args", [(), ("render", "--k8s", "--dra"), ("render", "--swarm")])
def test_an_inventory_uuid_outside_nvidias_grammar_is_refused(
    write: Write, tmp_path: Path, uuid: str, args: tuple[str, ...]
) -> None:
    document: dict[str, Any] = json.loads(GTX_M40.read_text())
    document["gpus"][0]["uuid"] = uuid
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps(document))
    env = write("DR_SAGEMAKER_CUDA_DEVICES=0", "DR_ROBOMAKER_CUDA_DEVICES=1")
    ran = run_main(*(args or ("plan",)), "--env-file", env, "--inventory", inventory)
    assert_sound(ran, ExitCode.CONFIG)
    assert "is not a GPU UUID" in ran.err


def test_a_single_quoted_dollar_reaches_compose_as_written(write: Write) -> None:
    env = write(
        "DRGPU_SHARING=mps",
        "DR_SAGEMAKER_CUDA_DEVICES=0",
        "DR_ROBOMAKER_CUDA_DEVICES=0",
        "DRGPU_MPS_IMAGE='${AWS_SECRET_ACCESS_KEY}'",
    )
    ran = run_main("render", "--env-file", env, "--inventory", GTX_M40)
    assert_sound(ran, ExitCode.OK)
    assert "image: $${AWS_SECRET_ACCESS_KEY}" in ran.out


# --- 10. what people read, and what DRfC reads ---------------------------------------------


def test_cuda_check_s_bad_usage_is_drgpu_s_one_line_error() -> None:
    for args in (("--expect", "-1"), ("--frameworks", "bogus")):
        ran = run_main("cuda-check", *args)
        assert_sound(ran, ExitCode.CONFIG)
        assert "probe.py" not in ran.err
        assert "usage:" not in ran.err


def test_bash_s_uid_reads_as_bash_reads_it(write: Write) -> None:
    env = write("DR_SAGEMAKER_CUDA_DEVICES=0", "DR_RUN_ID=racer-$UID")
    ran = run_main("plan", "--json", "--env-file", env, "--inventory", GTX_M40)
    assert_sound(ran, ExitCode.OK)
    assert json.loads(ran.out)["project"] == f"deepracer-racer-{os.getuid()}"


@pytest.mark.parametrize("name", ["RANDOM", "SECONDS", "BASHPID"])
def test_a_variable_only_bash_can_know_is_refused(write: Write, name: str) -> None:
    ran = plan(write(f"DR_LOCAL_S3_PREFIX=racer-${name}"))
    assert_sound(ran, ExitCode.CONFIG)
    assert f"${name} is set by DRfC's own shell" in ran.err


@pytest.mark.parametrize("run_id", ["eval-1", "eval-0"])
def test_a_run_id_naming_an_evaluation_is_refused(write: Write, run_id: str) -> None:
    ran = plan(write(f"DR_RUN_ID={run_id}"))
    assert_sound(ran, ExitCode.CONFIG)
    assert "starts with 'eval-'" in ran.err
