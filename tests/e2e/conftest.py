"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def project(bed: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A run id unique to the test; every container of its project is removed afterwards."""
    run_id = re.sub(r"[^a-z0-9]", "", request.node.name.lower())[-24:]
    yield run_id
    bed.cleanup_project(f"deepracer-{run_id}")
