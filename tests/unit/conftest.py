"""Shared fixtures of the unit tests: the example inventories, settings and compose files."""

from __future__ import annotations

import importlib.util
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from drgpu.core.compose_stack import Stack
from drgpu.core.model import Inventory
from drgpu.core.settings import Config, config_from_values
from drgpu.host.files import load_inventory, load_stack

REPO = Path(__file__).resolve().parents[2]
INVENTORIES = REPO / "examples" / "inventories"
GOLDEN_HELPER = REPO / "tests" / "golden" / "golden.py"


@pytest.fixture
def gtx_m40() -> Inventory:
    """A GTX 1650 (bus 81) listed before a Tesla M40 (bus 03): the M40 is index 0
    (tests/inventories/m40-first.json; DRfC's own box is examples/inventories/gtx1650-m40.json)."""
    return load_inventory(REPO / "tests" / "inventories" / "m40-first.json")


@pytest.fixture
def mig_l4() -> Inventory:
    """An A100 in MIG mode with two slices, and an L4."""
    return load_inventory(INVENTORIES / "a100-mig-plus-l4.json")


@pytest.fixture
def make_config() -> Callable[..., Config]:
    """Settings from keyword values (nothing read from disk), e.g. DR_WORKERS='2'."""

    def make(**values: str) -> Config:
        return config_from_values(values, {})

    return make


@pytest.fixture
def write_stack(tmp_path: Path) -> Callable[[str], Stack]:
    """A stack read from one compose file written with the given (dedented) YAML."""

    def write(text: str) -> Stack:
        path = tmp_path / "docker-compose.yml"
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return load_stack([path])

    return write


@pytest.fixture(scope="session")
def golden() -> ModuleType:
    """tests/golden/golden.py: `assert_matches_golden(name, text)`."""
    spec = importlib.util.spec_from_file_location("drgpu_golden", GOLDEN_HELPER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
