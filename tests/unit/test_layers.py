"""The package layers, enforced by ruff: the whole repository passes `ruff check`, and an
import that runs back up a layer (or reaches an outside world outside its adapter) fails.

Each bad import is checked through stdin under a file name in the layer's folder, so the
folder's ruff.toml applies and nothing is written to the tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def ruff() -> str:
    beside_python = Path(sys.executable).parent / "ruff"
    found = str(beside_python) if beside_python.is_file() else shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is missing (scripts/setup-test)")
    return found


def check_source(path: str, source: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ruff(), "check", "--no-cache", "--select", "TID251", "--stdin-filename", path, "-"],
        input=source,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_repository_passes_ruff() -> None:
    done = subprocess.run(
        [ruff(), "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("path", "source", "banned"),
    [
        ("drgpu/core/bad.py", "from drgpu.host.nvml import read_inventory\n", "drgpu.host"),
        ("drgpu/core/bad.py", "from drgpu.targets import swarm_stack\n", "drgpu.targets"),
        ("drgpu/core/bad.py", "from drgpu.commands import compose_run\n", "drgpu.commands"),
        ("drgpu/core/bad.py", "from drgpu.ui.talk import warn\n", "drgpu.ui"),
        ("drgpu/core/bad.py", "from drgpu import cli\n", "drgpu.cli"),
        ("drgpu/core/bad.py", "import rich.table\n", "rich"),
        ("drgpu/core/bad.py", "import typer\n", "typer"),
        ("drgpu/core/bad.py", "import subprocess\n", "subprocess"),
        (
            "drgpu/host/bad.py",
            "from drgpu.targets.compose_override import render_override\n",
            "drgpu.targets",
        ),
        ("drgpu/host/bad.py", "from drgpu.commands import status\n", "drgpu.commands"),
        ("drgpu/host/bad.py", "from drgpu.ui import tables\n", "drgpu.ui"),
        ("drgpu/host/bad.py", "import pynvml\n", "pynvml"),
        ("drgpu/host/bad.py", "import docker\n", "docker"),
        ("drgpu/targets/bad.py", "from drgpu.host import engine\n", "drgpu.host"),
        ("drgpu/targets/bad.py", "from drgpu.commands import compose_run\n", "drgpu.commands"),
        ("drgpu/targets/bad.py", "from drgpu.ui import tables\n", "drgpu.ui"),
        ("drgpu/commands/bad.py", "import subprocess\n", "subprocess"),
        ("drgpu/ui/bad.py", "import docker\n", "docker"),
        ("drgpu/cli.py", "import pynvml\n", "pynvml"),
    ],
)
def test_an_import_against_the_layers_fails(path: str, source: str, banned: str) -> None:
    done = check_source(path, f"{source}\nprint(dir())\n")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"`{banned}` is banned" in done.stdout


@pytest.mark.parametrize(
    ("path", "source"),
    [
        (
            "drgpu/core/fine.py",
            "from drgpu.core.model import Plan\nfrom drgpu.errors import ConfigError\n",
        ),
        ("drgpu/host/fine.py", "from drgpu.core.facts import ContainerFacts\n"),
        ("drgpu/targets/fine.py", "from drgpu.core.model import Plan\n"),
        (
            "drgpu/commands/fine.py",
            "from drgpu.host import engine\nfrom drgpu.ui.talk import warn\n",
        ),
        ("drgpu/host/nvml.py", "import pynvml\n"),
        ("drgpu/host/process.py", "import subprocess\n"),
        ("drgpu/host/engine.py", "import docker\n"),
    ],
)
def test_an_import_along_the_layers_passes(path: str, source: str) -> None:
    done = check_source(path, f"{source}\nprint(dir())\n")
    assert done.returncode == 0, done.stdout + done.stderr
