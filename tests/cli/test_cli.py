"""The drgpu command line, run in-process through `drgpu.cli.main` (no Docker, no NVML)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.cli.conftest import Settings, assert_one_error_line
from tests.plan_warnings import order_free, order_free_text
from tests.support.runners import Cli, Result, run_drgpu

REPO = Path(__file__).resolve().parents[2]
INVENTORIES = REPO / "examples" / "inventories"
GTX_M40 = INVENTORIES / "gtx1650-m40.json"  # 0: Tesla M40 (bus 03), 1: GTX 1650 (bus 81)
MIG_L4 = INVENTORIES / "a100-mig-plus-l4.json"
M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"
GTX1650 = "GPU-3b1d9c52-7a4e-4f0b-8c6d-2e9f1a7b5c30"
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


# --- plan ------------------------------------------------------------------------------------


def test_plan_prints_a_table_of_services_and_gpus(cli: Cli, settings: Settings) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1")
    result = cli("plan", "--env-file", env, "--inventory", GTX_M40)
    assert (result.code, order_free_text(result.err)) == (0, "")
    for text in ("deepracer-0", "sagemaker", "Tesla M40 24GB", "robomaker", "GTX 1650"):
        assert text in result.out
    assert "PCI bus order" in result.out


def test_plan_json_describes_every_service(cli: Cli, settings: Settings) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1")
    result = cli("plan", "--env-file", env, "--inventory", GTX_M40, "--json")
    assert (result.code, order_free_text(result.err)) == (0, "")
    document = json.loads(result.out)
    assert document["schema_version"] == 1
    assert document["project"] == "deepracer-0"
    assert order_free(document["warnings"]) == ()
    assert list(document["services"]) == ["sagemaker", "robomaker"]
    trainer = document["services"]["sagemaker"]
    assert trainer["role"] == "trainer"
    assert trainer["device_request"] is True
    assert [
        {key: gpu[key] for key in ("index", "uuid", "name", "pci_bus_id")}
        for gpu in trainer["gpus"]
    ] == [{"index": 0, "uuid": M40, "name": "Tesla M40 24GB", "pci_bus_id": "00000000:03:00.0"}]
    assert document["services"]["robomaker"]["gpus"][0]["uuid"] == GTX1650


def test_plan_warnings_go_to_stderr_and_into_the_json(cli: Cli, settings: Settings) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="1", DR_ROBOMAKER_CUDA_DEVICES="0")
    result = cli("plan", "--env-file", env, "--inventory", GTX_M40, "--json")
    assert result.code == 0
    document = json.loads(result.out)
    assert len(document["warnings"]) == 2  # CUDA's order differs on this box, and memory
    assert result.err == "".join(f"drgpu: warning: {w}\n" for w in document["warnings"])
    assert "under 8 GiB" in result.err


def test_plan_table_warnings_go_to_stderr_only(cli: Cli, settings: Settings) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="1")
    result = cli("plan", "--env-file", env, "--inventory", GTX_M40)
    assert result.code == 0
    assert "drgpu: warning:" in result.err
    assert "warning" not in result.out


def test_plan_reads_a_users_compose_file(cli: Cli, settings: Settings, tmp_path: Path) -> None:
    compose = tmp_path / "training.yml"
    compose.write_text("services:\n  rl_coach: {image: coach}\n  robomaker: {image: sim}\n")
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1")
    result = cli("plan", "--env-file", env, "--inventory", GTX_M40, "-f", compose, "--json")
    assert result.code == 0
    rl_coach = json.loads(result.out)["services"]["rl_coach"]
    assert rl_coach["environment"]["CUDA_VISIBLE_DEVICES"] == M40
    assert rl_coach["device_request"] is False


def test_plan_of_the_example_settings(cli: Cli) -> None:
    result = cli("plan", "--env-file", REPO / "system.env.example", "--inventory", GTX_M40)
    assert result.code == 0


# --- render ----------------------------------------------------------------------------------


def test_render_prints_the_override(cli: Cli, tmp_path: Path) -> None:
    env = tmp_path / "system.env"
    env.write_text((REPO / "system.env.example").read_text())
    result = cli("render", "--env-file", env, "--inventory", GTX_M40)
    assert (result.code, order_free_text(result.err)) == (0, "")
    assert result.out == (REPO / "tests" / "golden" / "gtx1650-m40.yml").read_text()


def test_render_output_writes_the_file_and_nothing_on_stdout(
    cli: Cli, settings: Settings, tmp_path: Path
) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="0")
    output = tmp_path / "out" / "override.yml"
    result = cli("render", "--env-file", env, "--inventory", GTX_M40, "-o", output)
    assert (result.code, result.out, order_free_text(result.err)) == (0, "", "")
    assert output.read_text().startswith("# Written by drgpu")
    assert M40 in output.read_text()


def test_render_output_replaces_its_own_file_and_leaves_no_temporary(
    cli: Cli, settings: Settings, tmp_path: Path
) -> None:
    output = tmp_path / "override.yml"
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="0")
    assert cli("render", "--env-file", env, "--inventory", GTX_M40, "-o", output).code == 0
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="1")
    assert cli("render", "--env-file", env, "--inventory", GTX_M40, "-o", output).code == 0
    assert GTX1650 in output.read_text()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["override.yml", "system.env"]


def test_render_refuses_to_overwrite_a_file_drgpu_did_not_write(
    cli: Cli, settings: Settings, tmp_path: Path
) -> None:
    output = tmp_path / "docker-compose.override.yml"
    output.write_text("services: {mine: {}}\n")
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="0")
    result = cli("render", "--env-file", env, "--inventory", GTX_M40, "-o", output)
    assert result.code == 2
    assert assert_one_error_line(result) == (
        f"drgpu: error: refusing to overwrite {output}: drgpu did not write it"
    )
    assert output.read_text() == "services: {mine: {}}\n"


def test_render_failing_midway_keeps_the_old_file(
    cli: Cli, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "override.yml"
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="0")
    assert cli("render", "--env-file", env, "--inventory", GTX_M40, "-o", output).code == 0
    before = output.read_text()

    def broken_replace(source: object, target: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("drgpu.commands.state_files.os.replace", broken_replace)
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="1")
    result = cli("render", "--env-file", env, "--inventory", GTX_M40, "-o", output)
    assert result.code == 2
    assert "No space left on device" in result.err
    assert_one_error_line(result)
    assert output.read_text() == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["override.yml", "system.env"]


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
        ("plan", *INV), 2, env="DR_SAGEMAKER_CUDA_DEVICES=cuda:1,2\n", says="write '1,2'"
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


def test_gpu_validation_error_hints_at_index_order(cli: Cli, settings: Settings) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="5")
    result = cli("plan", "--env-file", env, "--inventory", GTX_M40)
    assert result.err.splitlines()[1].startswith("  hint: GPU indices are nvidia-smi's")


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
