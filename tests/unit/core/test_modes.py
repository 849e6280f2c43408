"""Modes are enums: each prints and serializes as its setting's text, and mypy refuses a
misspelt one."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from drgpu.core.modes import DockerStyle, IndexOrder, Sharing, SwarmGpus, WorkerPlacement
from drgpu.core.settings import config_from_values
from drgpu.errors import ConfigError


def test_a_mode_reads_as_its_text() -> None:
    assert (str(Sharing.MPS), f"{Sharing.TIMESLICE}", f"{IndexOrder.CUDA:6}|") == (
        "mps",
        "timeslice",
        "cuda  |",
    )
    assert json.dumps({"sharing": Sharing.EXCLUSIVE}) == '{"sharing": "exclusive"}'
    assert str(WorkerPlacement.PACK) == "pack"


def test_the_settings_parse_into_modes() -> None:
    config = config_from_values(
        {
            "DR_DOCKER_STYLE": "Swarm",
            "DRGPU_SHARING": "mps",
            "DRGPU_WORKER_PLACEMENT": "",
            "DRGPU_INDEX_ORDER": "cuda",
        },
        {},
    )
    assert config.docker_style is DockerStyle.SWARM
    assert config.sharing is Sharing.MPS
    assert config.worker_placement is WorkerPlacement.SPREAD
    assert config.index_order is IndexOrder.CUDA
    assert config.deploys_to_swarm()
    assert config_from_values({}, {}).deploys_to_swarm(swarm_flag=True)
    assert not config_from_values({}, {}).deploys_to_swarm()


def test_an_unknown_mode_is_refused_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match="DRGPU_SHARING: 'shared' is not one of exclusive,"):
        config_from_values({"DRGPU_SHARING": "shared"}, {})
    assert [mode.value for mode in SwarmGpus] == ["auto", "pin", "generic"]


def test_mypy_refuses_a_misspelt_mode(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        textwrap.dedent(
            """
            from drgpu.core.modes import Sharing

            def shares(sharing: Sharing) -> bool:
                return sharing == Sharing.TIMESLICE or sharing == Sharing.TIMESLISE
            """
        )
    )
    stdout, _stderr, status = api.run(
        [
            "--strict",
            "--python-version=3.10",
            f"--cache-dir={tmp_path / 'cache'}",
            "--config-file=",
            str(snippet),
        ]
    )
    assert status == 1, stdout
    assert 'has no attribute "TIMESLISE"' in stdout
    assert stdout.count("error:") == 1, stdout
