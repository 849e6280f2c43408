"""The DRfC-mode additions to `up` and `drfc-env`, where no Docker is needed: bad input
gets one clear line and exit 2."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.cli.conftest import Settings, assert_one_error_line
from tests.support.runners import DRGPU_COMMAND, Cli


def test_drfc_env_outside_an_activated_drfc_shell_is_refused(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DR_DIR", raising=False)
    result = cli("drfc-env")
    assert (result.code, result.out) == (2, "false\n")  # eval "$(drgpu drfc-env)" fails
    assert "not an activated DeepRacer-for-cloud shell" in assert_one_error_line(result)
    shell = f'eval "$({DRGPU_COMMAND} drfc-env 2>/dev/null)" && echo started'
    env = {k: v for k, v in os.environ.items() if k != "DR_DIR"}
    done = subprocess.run(
        ["bash", "-c", shell], env=env, capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (1, "")  # as documented: the start never runs


def test_start_script_arguments_need_an_activated_drfc_shell(
    cli: Cli, settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("DR_DIR", raising=False)
    env_file = settings(DR_SAGEMAKER_CUDA_DEVICES="none", DR_ROBOMAKER_CUDA_DEVICES="none")
    result = cli("up", "--env-file", env_file, "--", "-w")
    assert result.code == 2
    assert "unexpected argument '-w'" in assert_one_error_line(result)
