"""drgpu/commands/swarm_setup.py: the node's files, read."""

from __future__ import annotations

from pathlib import Path

import pytest

from drgpu.commands.swarm_setup import read_node
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
