"""`drgpu render` from the command line: the override (or stack, or manifests) printed or
written, and a file it will not overwrite."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.conftest import (
    GTX1650,
    GTX_M40,
    M40,
    REPO,
    Settings,
    assert_one_error_line,
)
from tests.plan_warnings import order_free_text
from tests.support.runners import Cli, run_main


def test_render_prints_the_override(cli: Cli, tmp_path: Path) -> None:
    env = tmp_path / "system.env"
    env.write_text((REPO / "system.env.example").read_text())
    drfc_box = REPO / "examples" / "inventories" / "gtx1650-m40.json"  # DRfC's multi-GPU page
    result = cli("render", "--env-file", env, "--inventory", drfc_box)
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
    assert assert_one_error_line(result).startswith(
        f"drgpu: error: refusing to overwrite {output}: drgpu did not write it"
    )
    assert output.read_text() == "services: {mine: {}}\n"


@pytest.mark.parametrize(
    "edit",
    [
        lambda text: text.replace("capabilities:", "capabilities: # mine\n"),
        lambda text: text + "# a note of mine\n",
        lambda text: text.rpartition("# drgpu-sha256:")[0],  # the checksum line removed
        lambda text: text.split("\n", 1)[0] + "\nservices: {mine: {}}\n",  # the header kept
    ],
)
def test_render_never_overwrites_a_file_edited_since_drgpu_wrote_it(
    cli: Cli, settings: Settings, tmp_path: Path, edit: Callable[[str], str]
) -> None:
    output = tmp_path / "override.yml"
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="0")
    assert cli("render", "--env-file", env, "--inventory", GTX_M40, "-o", output).code == 0
    assert output.read_text().splitlines()[-1].startswith("# drgpu-sha256: ")
    edited = edit(output.read_text())
    output.write_text(edited)
    result = cli("render", "--env-file", env, "--inventory", GTX_M40, "-o", output)
    assert result.code == 2
    assert "it was changed since" in assert_one_error_line(result)
    assert output.read_text() == edited


def test_render_failing_midway_keeps_the_old_file(
    cli: Cli, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "override.yml"
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="0")
    assert cli("render", "--env-file", env, "--inventory", GTX_M40, "-o", output).code == 0
    before = output.read_text()

    def broken_replace(source: object, target: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("drgpu.host.state_files.os.replace", broken_replace)
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="1")
    result = cli("render", "--env-file", env, "--inventory", GTX_M40, "-o", output)
    assert result.code == 2
    assert "No space left on device" in result.err
    assert_one_error_line(result)
    assert output.read_text() == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["override.yml", "system.env"]


@pytest.mark.parametrize("target", ["--k8s", "--swarm"])
def test_render_prints_no_secret_of_the_shell(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # neither a setting nor DR_*: a secret of the shell, passed on by the compose file
    monkeypatch.setenv("MY_API_TOKEN", "shellT0ken77")
    compose = tmp_path / "docker-compose.yml"
    compose.write_text(
        "services:\n  sagemaker:\n    image: t:1\n    environment:\n      FOO: ${MY_API_TOKEN}\n"
    )
    env_file = tmp_path / "system.env"
    env_file.write_text("DR_SAGEMAKER_CUDA_DEVICES=0\nDR_ROBOMAKER_CUDA_DEVICES=\n")
    printed = run_main(
        "render", target, "--env-file", env_file, "--inventory", GTX_M40, "-f", compose
    )
    assert printed.code == 0, printed.err
    assert "shellT0ken77" not in printed.out + printed.err
    assert "****" in printed.out


@pytest.mark.parametrize("target", ["--k8s", "--swarm"])
@pytest.mark.parametrize("name", ["DR_LOCAL_S3_PASSWORD", "DB_PASSWD", "DR_UPLOAD_CREDENTIALS"])
def test_render_prints_no_secret_and_writes_them_to_a_private_file(
    target: str, name: str, tmp_path: Path
) -> None:
    compose = tmp_path / "docker-compose.yml"
    compose.write_text(
        f"services:\n  sagemaker:\n    image: t:1\n    environment:\n      {name}: hunter2\n"
        "      REWARD_FILE_S3_KEY: custom_files/reward_function.py\n"
        "      DR_DB_URL: postgres://drgpu:pa55w0rd@db:5432/runs\n"
    )
    env_file = tmp_path / "system.env"
    env_file.write_text("DR_SAGEMAKER_CUDA_DEVICES=0\nDR_ROBOMAKER_CUDA_DEVICES=\n")
    inventory = GTX_M40
    args = ["render", target, "--env-file", str(env_file), "--inventory", str(inventory)]
    printed = run_main(*args, "-f", compose)
    assert printed.code == 0, printed.err
    assert "hunter2" not in printed.out + printed.err
    assert "****" in printed.out
    assert "custom_files/reward_function.py" in printed.out  # an S3 object key: no secret
    assert "pa55w0rd" not in printed.out  # a URL's password
    # Kubernetes keeps the whole URL in the service's Secret; Swarm masks its password
    assert ("DR_DB_URL: '****'" if target == "--k8s" else "drgpu:****@db") in printed.out

    written = tmp_path / "out.yml"
    done = run_main(*args, "-f", compose, "-o", written)
    assert done.code == 0
    assert "hunter2" in written.read_text()
    assert written.stat().st_mode & 0o077 == 0
