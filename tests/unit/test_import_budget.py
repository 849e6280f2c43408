"""Start-up stays light: `drgpu --version` and `drgpu --help` load neither typer nor click
(drgpu/__main__.py answers them, help.txt kept equal to typer's help here), and `import
drgpu.cli` and a command's `--help` import none of the heavy libraries nor drgpu's commands
(those load in the command that needs them), and `render` and `up` load no other
command's model (`python -X importtime`).

The bounds can fail and hold on a loaded machine: the number of modules each start-up
imports beyond a bare `python -c pass` (today's counts plus a little), and drgpu's own
modules' share of the import time. Speed itself is measured by bench/ (bench_startup.py).
The interpreter caches byte code in a folder of its own (PYTHONPYCACHEPREFIX), so that
compiling drgpu's sources does not count and nothing is written to the tree."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import drgpu
from tests.support.runners import run_main

BARE = ("-c", "pass")
QUICK = {  # answered by drgpu/__main__.py (with runpy's imports, for `-m`)
    "drgpu --version": ("-m", "drgpu", "--version"),
    "drgpu --help": ("-m", "drgpu", "--help"),
}
LIGHT = {
    **QUICK,
    "import drgpu.cli": ("-c", "import drgpu.cli"),
    "drgpu --version": ("-m", "drgpu", "--version"),
    "drgpu --help": ("-m", "drgpu", "--help"),
    "drgpu plan --help": ("-m", "drgpu", "plan", "--help"),
    "drgpu up --help": ("-m", "drgpu", "up", "--help"),
}
HEAVY = (
    "rich",
    "yaml",
    "pynvml",
    "docker",
    "requests",
    "urllib3",
    "kubernetes_validate",
    "jsonschema",
    "http",
    "socket",
    "ssl",
    "drgpu.commands",
    "drgpu.targets",
)
OWN_SHARE = 0.25  # drgpu's own modules' share of the imports: a few percent today
QUICK_MODULES = 25  # beyond a bare interpreter: 18 today (runpy's)
LIGHT_MODULES = 135  # beyond a bare interpreter, with typer and click: 120 today
RUNS = 3  # the run where drgpu's share is least counts


@dataclass(frozen=True)
class Import:
    """One line of `-X importtime`: a module, its own time and the time with what it
    imported, in seconds."""

    name: str
    self_s: float
    cumulative_s: float
    top_level: bool  # not imported while importing another module


def parse_importtime(stderr: str) -> list[Import]:
    """The imports `-X importtime` reported on stderr."""
    found = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "[us]" in line:
            continue
        self_us, cumulative_us, name = line.removeprefix("import time:").split("|")
        found.append(
            Import(
                name=name.strip(),
                self_s=int(self_us) / 1e6,
                cumulative_s=int(cumulative_us) / 1e6,
                top_level=not name.startswith("  ", 1),
            )
        )
    return found


def imports(argv: tuple[str, ...], cache: Path) -> list[Import]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        env={**env, "PYTHONPYCACHEPREFIX": str(cache)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return parse_importtime(done.stderr)


def whole_s(run: list[Import]) -> float:
    return sum(i.cumulative_s for i in run if i.top_level)


def own_s(run: list[Import]) -> float:
    return sum(i.self_s for i in run if i.name == "drgpu" or i.name.startswith("drgpu."))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[list[Import]]]:
    """Each light start-up's RUNS runs, after one run that fills the cache."""
    cache = tmp_path_factory.mktemp("pycache")
    imports(LIGHT["drgpu up --help"], cache)
    return {
        label: [imports(argv, cache) for _ in range(RUNS)]
        for label, argv in {"bare": BARE, **LIGHT}.items()
    }


def test_the_parser_reads_importtime_lines() -> None:
    stderr = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:       120 |        120 |   drgpu.errors\n"
        "import time:       700 |      40000 | drgpu.cli\n"
    )
    assert parse_importtime(stderr) == [
        Import("drgpu.errors", 0.00012, 0.00012, top_level=False),
        Import("drgpu.cli", 0.0007, 0.04, top_level=True),
    ]


@pytest.mark.parametrize("label", LIGHT)
def test_a_light_start_up_imports_nothing_heavy(
    label: str, runs: dict[str, list[list[Import]]]
) -> None:
    names = {i.name for i in runs[label][0]}
    assert ("drgpu.cli" in names) == (label not in QUICK)
    heavy = HEAVY + (("typer", "click") if label in QUICK else ())
    found = sorted(n for n in names for h in heavy if n == h or n.startswith(f"{h}."))
    assert found == [], f"{label} imports {found}"


@pytest.mark.parametrize("label", LIGHT)
def test_a_light_start_up_stays_in_its_budget(
    label: str, runs: dict[str, list[list[Import]]]
) -> None:
    modules = len(runs[label][0]) - len(runs["bare"][0])
    bound = QUICK_MODULES if label in QUICK else LIGHT_MODULES
    assert modules <= bound, f"{label} imports {modules} modules beyond a bare interpreter"
    if label not in QUICK:  # (theirs are a few milliseconds: a busy machine's noise)
        share = min(own_s(run) / whole_s(run) for run in runs[label])
        assert share < OWN_SHARE, f"{label}: drgpu's own modules take {share:.0%} of the imports"


def test_the_quick_help_is_typers_help(monkeypatch: pytest.MonkeyPatch) -> None:
    """help.txt is what typer prints 78 columns wide (in any terminal of 80 columns or more,
    and into a pipe). After changing the top-level help, write it anew:
    COLUMNS=80 .venv/bin/python -c 'import drgpu.cli; drgpu.cli.main(["--help"])' >drgpu/help.txt
    """
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_main("--help")
    assert code == 0
    assert (Path(drgpu.__file__).parent / "help.txt").read_text() == out


STARTS = {"render": "import drgpu.commands.rendering", "up": "import drgpu.commands.up"}
NOT_YET = (  # other commands' models, and what only the end of `up` needs (loaded then)
    "rich",
    "tarfile",
    "concurrent.futures",
    "drgpu.core.gpu_usage",
    "drgpu.core.host_checks",
    "drgpu.commands.status",
    "drgpu.commands.doctor",
)


@pytest.mark.parametrize("command", STARTS)
def test_render_and_up_load_no_other_commands_model(command: str, tmp_path: Path) -> None:
    names = {i.name for i in imports(("-c", STARTS[command]), tmp_path)}
    found = sorted(n for n in names for h in NOT_YET if n == h or n.startswith(f"{h}."))
    assert found == [], f"{command} imports {found} before it runs"
