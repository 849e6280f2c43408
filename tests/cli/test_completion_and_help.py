"""Shell completion in a real bash, `--version`, and help text: plain (no escape artefacts)
and ending with examples for every command."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import version as installed_version
from pathlib import Path

import pytest
import typer

from drgpu import __version__
from drgpu.cli import app
from tests.support.runners import run_main

DRGPU = Path(sys.executable).parent / "drgpu"
COMPLETE = """
eval "$(drgpu --show-completion; true)"
complete -p drgpu
COMP_WORDS=(drgpu sta); COMP_CWORD=1; _drgpu_completion drgpu
echo "subcommand: ${COMPREPLY[*]}"
COMP_WORDS=(drgpu status --wa); COMP_CWORD=2; _drgpu_completion drgpu
echo "option: ${COMPREPLY[*]}"
"""


def test_bash_completes_a_subcommand_and_an_option() -> None:
    bash = shutil.which("bash")
    assert bash is not None and DRGPU.is_file()
    env = {"PATH": f"{DRGPU.parent}:/usr/bin:/bin", "HOME": "/nonexistent"}
    done = subprocess.run(
        [bash, "--norc", "--noprofile", "-c", COMPLETE],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "complete -o default -F _drgpu_completion drgpu" in done.stdout
    assert "subcommand: status" in done.stdout
    assert "option: --watch" in done.stdout


@pytest.mark.parametrize(
    ("shell", "mark"),
    [("bash", "complete -o"), ("zsh", "compdef"), ("fish", "complete --command drgpu")],
)
def test_show_completion_prints_a_script_for_each_shell(shell: str, mark: str) -> None:
    # Where the shell cannot be detected (typer's switch for that), it is named.
    done = subprocess.run(
        [str(DRGPU), "--show-completion", shell],
        env={"PATH": "/usr/bin:/bin", "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert mark in done.stdout and "_DRGPU_COMPLETE" in done.stdout


def test_version_flag_and_command_print_the_package_version() -> None:
    assert __version__ == installed_version("drgpu")
    assert run_main("--version") == (0, f"{__version__}\n", "")
    assert run_main("version") == (0, f"{__version__}\n", "")


def command_names() -> list[str]:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return sorted(group.commands)


@pytest.mark.parametrize("name", command_names())
def test_each_help_is_plain_and_ends_with_examples(name: str) -> None:
    code, out, _ = run_main(name, "--help")
    assert code == 0
    assert "\\[" not in out
    paragraphs = out.rstrip().split("\n\n")
    assert paragraphs[-2].strip() == "Examples:"
    assert all("drgpu " in line for line in paragraphs[-1].splitlines())


def test_defaults_show_without_a_backslash() -> None:
    _, out, _ = run_main("status", "--help")
    assert "[default: 1.0;" in out
    assert "0.1<=x<=86400.0]" in out
