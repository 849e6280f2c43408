"""DRGPU_LOG: each program drgpu runs, each engine API call and each NVML call on stderr,
with its duration; never a secret value; off (and `logging` not even imported) unless set."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import GTX_M40, assert_one_error_line
from tests.support.runners import Cli, run_drgpu

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = REPO / "tests" / "topologies" / "gtx1650-m40.json"
BUILD = REPO / "scripts" / "fake-nvml-build"
SECRET = "s3cr3t-value-never-shown"


@pytest.fixture(scope="module")
def fake_nvml() -> Path:
    """The directory of the fake libnvidia-ml.so.1 (built once, cached by the script)."""
    done = subprocess.run([str(BUILD)], capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        pytest.fail(f"scripts/fake-nvml-build failed:\n{done.stderr}")
    return Path(lines[-1])


def drgpu(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """drgpu in a process of its own (NVML's library is found when a process starts)."""
    environment = {k: v for k, v in os.environ.items() if k != "DRGPU_LOG"} | env
    return run_drgpu(*args, env=environment, timeout=120)


def test_each_nvml_and_engine_call_is_logged_with_its_duration(
    fake_nvml: Path, tmp_path: Path
) -> None:
    done = drgpu(
        "gpus",
        DRGPU_LOG="debug",
        LD_LIBRARY_PATH=str(fake_nvml),
        FAKE_NVML_TOPOLOGY=str(TOPOLOGY),
        DOCKER_HOST=f"unix://{tmp_path}/absent.sock",
    )
    assert done.returncode == 0, done.stderr
    ms = r"in \d+\.\d{3} ms"
    for pattern in (
        rf"^drgpu DEBUG drgpu\.host\.nvml: nvmlInit {ms}$",
        rf"^drgpu DEBUG drgpu\.host\.nvml: nvmlDeviceGetCount {ms}$",
        rf"^drgpu DEBUG drgpu\.host\.nvml: nvmlDeviceGetMigMode failed \(NVMLError_\w+\) {ms}$",
        rf"^drgpu DEBUG drgpu\.host\.nvml: nvmlShutdown {ms}$",
        rf"^drgpu DEBUG drgpu\.host\.docker_api: GET /containers/json\?all=1&filters=.*"
        rf"drgpu\.run_id.*: failed \(.*No such file or directory\) {ms}$",
    ):
        assert re.search(pattern, done.stderr, re.MULTILINE), (pattern, done.stderr)


def test_each_program_is_logged_with_its_argv_exit_and_duration_and_no_secret(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compose = Path(sys.executable).parent / "docker-compose"
    if not compose.is_file():
        pytest.skip("docker-compose (the test dependency) is not installed")
    wrapper = tmp_path / "compose-with-a-token"  # a Compose whose first argument is a secret
    wrapper.write_text(f'#!/bin/sh\nshift\nexec {compose} "$@"\n')
    wrapper.chmod(0o755)
    env = tmp_path / "system.env"
    env.write_text((REPO / "system.env.example").read_text() + f"DR_UPLOAD_API_KEY={SECRET}\n")
    monkeypatch.setenv("DRGPU_COMPOSE", f"{wrapper} {SECRET}")
    monkeypatch.setenv("DRGPU_LOG", "debug")
    code, out, err = cli("render", "--k8s", "--env-file", env, "--inventory", GTX_M40)
    assert code == 0, err
    assert re.search(rf"^drgpu INFO drgpu\.host\.process: run: {wrapper} \*\*\*\* -p ", err, re.M)
    ended = rf"^drgpu INFO drgpu\.host\.process: exit 0 in \d+\.\d{{3}} ms: {wrapper} \*\*\*\* "
    assert re.search(ended + r".* config --format json$", err, re.MULTILINE), err
    assert SECRET not in err and SECRET not in out


def test_an_unknown_level_is_one_error_line_and_exit_2(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRGPU_LOG", "loud")
    result = cli("gpus", "--inventory", GTX_M40)
    assert result.code == 2
    assert "DRGPU_LOG='loud' is not a log level" in assert_one_error_line(result)


def test_unset_it_costs_no_logging_import(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from drgpu.cli import main\n"
        "try:\n"
        f"    main(['render', '--env-file', {str(REPO / 'system.env.example')!r},"
        f" '--inventory', {str(GTX_M40)!r}])\n"
        "except SystemExit as done:\n"
        "    assert done.code == 0, done.code\n"
        "print('logging' in sys.modules, file=sys.stderr)\n"
    )
    environment = {k: v for k, v in os.environ.items() if k != "DRGPU_LOG"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env=environment,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == "False"
