"""drgpu/commands/swarm_setup.py: the node's files, read."""

from __future__ import annotations

from pathlib import Path

import pytest

from drgpu.commands.swarm_setup import read_node
from drgpu.host import container_toolkit
from tests.unit.core.test_swarm_node import differences


def test_missing_and_broken_files_are_differences(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no.sock")
    broken = tmp_path / "daemon.json"
    broken.write_text("{not json")
    state = read_node(broken, tmp_path / "config.toml")
    assert (
        state.daemon_json_problem is not None and "not JSON (line 1)" in state.daemon_json_problem
    )
    assert state.toolkit_problem is not None and state.toolkit_problem.startswith("absent")
    assert state.engine is None
    assert len(differences(state)) == 3


def test_the_runtimes_mode_is_read_and_jit_cdi_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """config.toml's `[nvidia-container-runtime] mode`: jit-cdi (1.18's default) ignores
    swarm-resource in toolkit 1.18.x, and with no toolkit program to say its version here,
    the report says what to change."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no.sock")
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-ctk: the version is unknown
    config = tmp_path / "config.toml"
    config.write_text(
        'swarm-resource = "DOCKER_RESOURCE_NVIDIA-GPU"\n'
        '[nvidia-container-runtime]\nmode = "jit-cdi"\n'
    )
    state = read_node(tmp_path / "daemon.json", config)
    assert state.toolkit is not None
    assert (state.toolkit.version, state.toolkit.mode) == (None, "jit-cdi")
    mode = [d for d in differences(state) if "config.toml: mode: " in d]
    assert len(mode) == 1 and 'set mode = "legacy"' in mode[0]
    config.write_text(config.read_text().replace("jit-cdi", "legacy"))
    legacy = read_node(tmp_path / "daemon.json", config)
    assert not [d for d in differences(legacy) if "config.toml: mode: " in d]


def test_the_toolkits_version_is_asked_of_nvidia_ctk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Toolkit 1.18.0 with no mode written runs jit-cdi: a difference, with the fix."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no.sock")
    program = tmp_path / "nvidia-ctk"
    program.write_text(
        "#!/bin/sh\necho 'NVIDIA Container Toolkit CLI version 1.18.0'\necho commit: x\n"
    )
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    config = tmp_path / "config.toml"
    config.write_text('swarm-resource = "DOCKER_RESOURCE_NVIDIA-GPU"\n')
    toolkit, problem = container_toolkit.read(config)
    assert problem is None
    assert (toolkit.version, toolkit.mode, toolkit.effective_mode) == ((1, 18, 0), None, "jit-cdi")
    [mode] = [
        d for d in differences(read_node(tmp_path / "daemon.json", config)) if ": mode: " in d
    ]
    assert "toolkit 1.18.0 runs in mode jit-cdi (no mode written (auto))" in mode
