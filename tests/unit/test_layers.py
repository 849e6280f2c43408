"""The package layers, enforced by ruff: the whole repository passes `ruff check`, and an
import that runs back up a layer (or reaches an outside world outside its adapter) fails.
The pure layers (drgpu/core, drgpu/targets) read no environment, file or clock either:
ruff bans what it can name, and a walk of their syntax trees finds what it cannot (a
method of a Path, the builtin `open`, `__file__`).

Each bad import is checked through stdin under a file name in the layer's folder, so the
folder's ruff.toml applies and nothing is written to the tree."""

from __future__ import annotations

import ast
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
        ("drgpu/targets/bad.py", "from drgpu.host import engine\n", "drgpu.host"),
        ("drgpu/targets/bad.py", "from drgpu.commands import compose_run\n", "drgpu.commands"),
        ("drgpu/targets/bad.py", "from drgpu.ui import tables\n", "drgpu.ui"),
        ("drgpu/commands/bad.py", "import subprocess\n", "subprocess"),
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
    ],
)
def test_an_import_along_the_layers_passes(path: str, source: str) -> None:
    done = check_source(path, f"{source}\nprint(dir())\n")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("layer", ["core", "targets"])
@pytest.mark.parametrize(
    ("source", "banned"),
    [
        ("import os\nprint(os.environ['HOME'])\n", "os.environ"),
        ("from os import environ\nprint(environ)\n", "os.environ"),
        ("import os\nprint(os.getenv('HOME'))\n", "os.getenv"),
        ("import builtins\nprint(builtins.open('x'))\n", "builtins.open"),
        ("import io\nprint(io.open('x'))\n", "io.open"),
        ("from pathlib import Path\nprint(Path.read_text(Path('x')))\n", "pathlib.Path.read_text"),
        ("from pathlib import Path\nprint(Path.cwd())\n", "pathlib.Path.cwd"),
        ("import time\nprint(time.time())\n", "time.time"),
        ("from time import monotonic\nprint(monotonic())\n", "time.monotonic"),
        ("from datetime import datetime\nprint(datetime.now())\n", "datetime.datetime.now"),
        ("import datetime\nprint(datetime.date.today())\n", "datetime.date.today"),
    ],
)
def test_the_environment_files_and_clock_are_banned_in_the_pure_layers(
    layer: str, source: str, banned: str
) -> None:
    done = check_source(f"drgpu/{layer}/bad.py", source)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"`{banned}` is banned" in done.stdout


# What ruff's banned-api cannot name: it does not know that `path` is a Path, and the
# builtin `open` and `__file__` are no imports. Found by name in the syntax tree.
WORLD_METHODS = frozenset(
    {
        "read_text",
        "read_bytes",
        "open",
        "is_file",
        "is_dir",
        "exists",
        "stat",
        "lstat",
        "iterdir",
        "glob",
        "rglob",
        "resolve",
        "absolute",
        "expanduser",
        "readlink",
        "samefile",
        "write_text",
        "write_bytes",
        "touch",
        "mkdir",
        "unlink",
    }
)
PURE_LAYERS = ("drgpu/core", "drgpu/targets")


def world_reads(source: str) -> list[str]:
    """Where `source` asks the outside world in a way ruff cannot see: `line: what`."""
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Call, ast.Name)):
            continue
        what = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            what = f".{node.func.attr}()" if node.func.attr in WORLD_METHODS else None
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            what = "open()" if node.func.id == "open" else None
        elif isinstance(node, ast.Name) and node.id == "__file__":
            what = "__file__"
        if what is not None:
            found.append((node.lineno, node.col_offset, what))
    return [f"{line}: {what}" for line, _, what in sorted(found)]


def test_the_pure_layers_read_no_file_and_ask_no_disk() -> None:
    found = [
        f"{path.relative_to(REPO)}:{where}"
        for layer in PURE_LAYERS
        for path in sorted((REPO / layer).rglob("*.py"))
        for where in world_reads(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "take texts and facts as arguments (drgpu/host/files reads them)"


@pytest.mark.parametrize(
    ("source", "found"),
    [
        *[(f"path.{method}()\n", [f"1: .{method}()"]) for method in sorted(WORLD_METHODS)],
        ("Path(name).read_text(encoding='utf-8')\n", ["1: .read_text()"]),
        ("with open('system.env') as stream:\n    pass\n", ["1: open()"]),
        ("here = Path(__file__).parent\n", ["1: __file__"]),
    ],
)
def test_a_read_of_the_world_is_found(source: str, found: list[str]) -> None:
    assert world_reads(source) == found


def test_pure_path_work_is_no_read_of_the_world() -> None:
    source = (
        "beside = env_file.with_name('run.env')\n"
        "shown = str(path.parent / path.name).replace('a', 'b').format(x=1)\n"
        "config = dataclasses.replace(config, warnings=())\n"
    )
    assert world_reads(source) == []


# The commands (drgpu/commands/__init__.py names them); the other modules there are steps
# they share, which import no command either.
COMMANDS = frozenset(
    [
        "plan",
        "rendering",
        "up",
        "down",
        "gpus",
        "status",
        "report",
        "doctor",
        "cuda_check",
        "swarm_setup",
    ]
)


def commands_imported(source: str) -> set[str]:
    """The command modules `source` imports (`from drgpu.commands[.x] import ...`)."""
    named: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "drgpu.commands":
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("drgpu.commands."):
            named.add((node.module or "").rsplit(".", 1)[1])
    return named & COMMANDS


def test_no_command_module_imports_a_command() -> None:
    found = {
        path.stem: sorted(commands_imported(path.read_text()) - {path.stem})
        for path in sorted((REPO / "drgpu" / "commands").glob("*.py"))
    }
    assert {name: names for name, names in found.items() if names} == {}


def test_a_command_importing_another_is_found() -> None:
    source = "from drgpu.commands import status, options\nfrom drgpu.commands.up import up\n"
    assert commands_imported(source) == {"status", "up"}
