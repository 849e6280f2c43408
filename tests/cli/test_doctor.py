"""`drgpu doctor` through drgpu's own main, with the gathering replaced (no NVML, no
engine): what reaches stdout and stderr, and the exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from drgpu.commands import doctor
from drgpu.core import host_checks
from drgpu.core.facts import EngineFacts
from drgpu.core.inputs import Inputs
from drgpu.core.model import Inventory
from drgpu.core.settings import config_from_values
from tests.support.runners import Cli


def facts(**changes: Any) -> host_checks.HostFacts:
    fields: dict[str, Any] = {
        "config": config_from_values({}, {}),
        "inventory": Inventory(gpus=(), driver_version="550.54.14", cuda_driver_version=12040),
        "errors": {"docker": ("cannot reach the Docker engine", "is it up?")},
        "compose_version": "2.32.1\n",
    }
    fields.update(changes)
    return host_checks.HostFacts(Path("system.env"), **fields)


def test_doctor_failure_exits_6_naming_the_failed_checks(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[Path, list[str], bool]] = []

    def gather(target: Inputs, images: list[str], probe: bool) -> host_checks.HostFacts:
        seen.append((target.env_file, images, probe))
        return facts()

    monkeypatch.setattr(doctor, "gather", gather)
    code, out, err = cli("doctor", "--image", "a:1", "--image", "b:2", "--probe")
    assert code == 6
    assert seen == [(Path("system.env"), ["a:1", "b:2"], True)]
    assert "FAIL" in out and "fix: is it up?" in out
    assert err == "drgpu: error: 1 check(s) failed: docker\n  hint: is it up?\n"


def test_doctor_warnings_pass(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        doctor,
        "gather",
        lambda target, images, probe: facts(
            daemon=EngineFacts("27.3.1", "runc", ("runc",), api_version="1.47"), errors={}
        ),
    )
    code, out, err = cli("doctor", "--json")
    assert (code, err) == (0, "")
    document = json.loads(out)
    assert document["ok"] is True
    assert {c["level"] for c in document["findings"]} == {"ok", "warn"}


def test_doctor_without_an_engine_says_so_in_a_sentence_within_100_columns(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    Path("system.env").write_text("DR_SAGEMAKER_CUDA_DEVICES=0\n")
    code, out, _err = cli("doctor")
    assert code == 6
    assert all(len(line) <= 100 for line in out.splitlines()), out
    finding = " ".join(
        line.split("│")[3].strip() for line in out.splitlines() if line.count("│") == 4
    )
    assert "Docker: cannot reach the Docker engine at /" in finding  # (its path folded)
    assert "No such file or directory" in finding
    for repr_mark in ("('", "Error(", "Connection aborted"):
        assert repr_mark not in out
