"""The drgpu command line as a whole, run in-process (no Docker, no NVML): help and
version, NVML unavailable, every bad input's exit code and error line, the entry points."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.cli.conftest import (
    GTX_M40,
    M40,
    MIG_L4,
    Settings,
    assert_one_error_line,
)
from tests.support.runners import Cli, Result, run_drgpu

NO_DRIVER = json.dumps({"init_error": "driver_not_loaded", "gpus": []})


# --- help and version ------------------------------------------------------------------------


def test_help_exits_zero_and_lists_commands(cli: Cli) -> None:
    result = cli("--help")
    assert result.code == 0
    for command in ("plan", "render", "up", "down", "gpus"):
        assert command in result.out


def test_no_arguments_prints_help(cli: Cli) -> None:
    result = cli()
    assert result.code == 0
    assert "Usage:" in result.out


def test_plan_help_shows_the_inventory_option(cli: Cli) -> None:
    result = cli("plan", "--help")
    assert result.code == 0
    assert "--inventory" in result.out


def test_version_prints_the_package_version(cli: Cli) -> None:
    from drgpu import __version__

    assert cli("version") == Result(0, f"{__version__}\n", "")


def test_a_typer_outside_the_pin_is_one_line_not_a_traceback(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """typer 0.20+ carries its own click (seen on a GPU machine's image: typer 0.27.2)."""
    import typer

    monkeypatch.setattr(typer, "__version__", "0.27.2")
    code, out, err = cli("gpus")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "drgpu: error: drgpu needs typer below 0.20 (pyproject.toml), this Python has 0.27.2",
        "  hint: pip install 'typer>=0.15,<0.20'",
    ]


def test_help_lists_status_and_doctor(cli: Cli) -> None:
    code, out, _ = cli("--help")
    assert code == 0
    assert "status" in out and "doctor" in out


# --- NVML unavailable ------------------------------------------------------------------------


def test_inventory_without_nvml_fails_with_exit_4_when_a_gpu_is_asked(
    cli: Cli, settings: Settings, tmp_path: Path
) -> None:
    inventory = tmp_path / "box.json"
    inventory.write_text(NO_DRIVER)
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="0")
    result = cli("plan", "--env-file", env, "--inventory", inventory)
    assert result.code == 4
    assert "driver_not_loaded" in assert_one_error_line(result)
    assert result.out == ""


def test_cpu_only_stack_works_with_that_inventory(
    cli: Cli, settings: Settings, tmp_path: Path
) -> None:
    inventory = tmp_path / "box.json"
    inventory.write_text(NO_DRIVER)
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="", DR_ROBOMAKER_CUDA_DEVICES="none")
    result = cli("render", "--env-file", env, "--inventory", inventory)
    assert (result.code, result.err) == (0, "")
    assert "NVIDIA_VISIBLE_DEVICES: void" in result.out


# --- every bad input: its exit code, and one line on stderr ----------------------------------


@dataclass(frozen=True)
class BadInput:
    """A command whose input is wrong, and the exit code it must end with."""

    args: tuple[str, ...]
    code: int
    env: str = "DR_SAGEMAKER_CUDA_DEVICES=0\nDR_ROBOMAKER_CUDA_DEVICES=1\n"
    files: dict[str, str] = field(default_factory=dict)
    says: str = ""


INV = ("--inventory", str(GTX_M40))
BAD_INPUTS = {
    "missing settings file": BadInput(
        ("plan", "--env-file", "absent.env", *INV), 2, says="no settings file"
    ),
    "default settings file missing": BadInput(("plan", *INV), 2, env="", says="system.env"),
    "misspelt drgpu key": BadInput(
        ("plan", *INV), 2, env="DRGPU_SHARNG=exclusive\n", says="did you mean DRGPU_SHARING"
    ),
    "torch device string": BadInput(
        ("plan", *INV),
        2,
        env="DR_SAGEMAKER_CUDA_DEVICES=cuda:1,2\n",
        says="CUDA's GPU 1 (CUDA's order guessed) is the Tesla M40 24GB: write its"
        " nvidia-smi index '0'",
    ),
    "empty list entry": BadInput(
        ("plan", *INV), 2, env="DR_ROBOMAKER_CUDA_DEVICES=1,,0\n", says="write '1,0'"
    ),
    "zero workers": BadInput(("plan", *INV), 2, env="DR_WORKERS=0\n", says="DR_WORKERS"),
    "bad run id": BadInput(("render", *INV), 2, env="DR_RUN_ID=My Run\n", says="DR_RUN_ID"),
    "unknown option": BadInput(("plan", "--bogus"), 2, says="--bogus"),
    "unknown command": BadInput(("deploy",), 2),
    "option without its value": BadInput(("plan", "--env-file"), 2),
    "missing inventory": BadInput(
        ("plan", "--inventory", "absent.json"), 2, says="cannot read inventory"
    ),
    "inventory not json": BadInput(
        ("plan", "--inventory", "box.json"), 2, files={"box.json": "{gpus"}, says="box.json:1"
    ),
    "inventory not a topology": BadInput(
        ("plan", "--inventory", "box.json"), 2, files={"box.json": "[]"}, says="'gpus' list"
    ),
    "compose not yaml": BadInput(
        ("plan", *INV, "-f", "c.yml"), 2, files={"c.yml": "services: [\n"}, says="not valid YAML"
    ),
    "compose without services": BadInput(
        ("plan", *INV, "-f", "c.yml"), 2, files={"c.yml": "version: '3'\n"}, says="no 'services'"
    ),
    "missing compose file": BadInput(("plan", *INV, "-f", "absent.yml"), 2, says="absent.yml"),
    "unknown index": BadInput(
        ("plan", *INV), 3, env="DR_SAGEMAKER_CUDA_DEVICES=2\n", says="this machine has 0: Tesla"
    ),
    "same gpu for both": BadInput(
        ("plan", *INV),
        3,
        env="DR_SAGEMAKER_CUDA_DEVICES=0\nDR_ROBOMAKER_CUDA_DEVICES=03:00.0\n",
        says="asked for by both",
    ),
    "same gpu named twice": BadInput(
        ("plan", *INV), 3, env=f"DR_SAGEMAKER_CUDA_DEVICES=0,{M40}\n", says="already in the list"
    ),
    "two bad keys": BadInput(
        ("render", *INV),
        3,
        env="DR_SAGEMAKER_CUDA_DEVICES=5\nDR_ROBOMAKER_CUDA_DEVICES=6\n",
        says="no GPU matches '6'",
    ),
    "mig gpu asked whole": BadInput(
        ("plan", "--inventory", str(MIG_L4)),
        3,
        env="DR_SAGEMAKER_CUDA_DEVICES=0\n",
        says="in MIG mode",
    ),
    "all on a machine without gpus": BadInput(
        ("plan", "--inventory", "box.json"),
        3,
        env="DR_ROBOMAKER_CUDA_DEVICES=all\n",
        files={"box.json": '{"gpus": []}'},
        says="has none",
    ),
    "cuda-check with both --service and --all": BadInput(
        ("cuda-check", "--service", "robomaker", "--all"), 2, says="are alternatives"
    ),
    "nvml unavailable": BadInput(
        ("render", "--inventory", "box.json"),
        4,
        files={"box.json": NO_DRIVER},
        says="driver_not_loaded",
    ),
}


@pytest.mark.parametrize("case", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_gives_its_exit_code_and_one_error_line(
    case: BadInput, cli: Cli, tmp_path: Path
) -> None:
    if case.env:
        (tmp_path / "system.env").write_text(case.env)
    for name, text in case.files.items():
        (tmp_path / name).write_text(text)
    result = cli(*case.args)
    assert result.code == case.code, result.err
    assert case.says in assert_one_error_line(result)
    assert result.out == ""


def test_two_bad_keys_are_both_reported(cli: Cli, settings: Settings) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="5", DR_ROBOMAKER_CUDA_DEVICES="GPU-ffff")
    line = assert_one_error_line(cli("plan", "--env-file", env, "--inventory", GTX_M40))
    assert "no GPU matches '5'" in line
    assert "no GPU matches 'GPU-ffff'" in line


def test_a_gpu_that_does_not_exist_hints_at_the_machines_gpus(cli: Cli, settings: Settings) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="5")
    result = cli("plan", "--env-file", env, "--inventory", GTX_M40)
    assert result.err.splitlines()[1] == (
        "  hint: `drgpu gpus` lists this machine's GPUs; a bare index is nvidia-smi's"
    )


# --- the installed entry points (subprocesses) -----------------------------------------------


def test_python_dash_m_drgpu_help_works() -> None:
    completed = run_drgpu("--help", timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert "Usage:" in completed.stdout
    assert completed.stderr == ""


def test_importing_the_cli_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, drgpu.cli\n"
        "heavy = ('docker', 'pynvml', 'rich', 'yaml')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == "[]\n"


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["report", "--run", "7", "--json"], 2),  # a run never watched
        (["cuda-check", "--all", "--json"], 5),  # no engine to ask
        (["cuda-check", "--all", "--service", "robomaker", "--json"], 2),
    ],
)
def test_a_json_command_that_fails_still_prints_one_document(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], code: int
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    (tmp_path / "system.env").write_text("DR_RUN_ID=3\n")
    result = cli(*args)
    document = json.loads(result.out)
    assert (result.code, document["ok"]) == (code, False)
    [error] = document["findings"]
    assert (error["kind"], error["level"]) == ("error", "fail")
    assert result.err.splitlines()[0] == f"drgpu: error: {error['message']}"
