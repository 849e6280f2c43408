"""The adversarial tests' shared fixture: drgpu with no Docker engine to reach."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def no_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Docker engine and a Compose that does nothing: only drgpu's own checks run (as
    the invoking user, not on behalf of a sudo caller)."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setenv("DRGPU_COMPOSE", "/bin/true")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("DRGPU_DEBUG", raising=False)
    monkeypatch.delenv("SUDO_UID", raising=False)
