"""system.env and run.env, read from real files without touching os.environ."""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest

from drgpu.core.devices import NO_GPU, DeviceRequest, SelectorKind
from drgpu.core.inputs import Inputs
from drgpu.core.settings import DEFAULT_MPS_IMAGE, SETTINGS, Config, is_service_key
from drgpu.errors import ConfigError, ExitCode
from drgpu.host.files import read_settings


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def config_error(env_file: Path, run_env: Path | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        read_settings(Inputs(env_file, run_env))
    assert caught.value.exit_code is ExitCode.CONFIG
    assert "\n" not in caught.value.message
    return caught.value


@pytest.fixture
def system_env(tmp_path: Path) -> Path:
    return write(
        tmp_path / "system.env",
        """
        # a comment
        DR_SAGEMAKER_CUDA_DEVICES=0
        DR_ROBOMAKER_CUDA_DEVICES=1
        DR_WORKERS=2
        DR_RUN_ID=0
        DR_HOST_X=False
        DR_DOCKER_STYLE=compose
        DR_LOCAL_S3_BUCKET=bucket
        """,
    )


def test_reads_deepracer_keys(system_env: Path) -> None:
    config = read_settings(Inputs(system_env))
    assert config.workers == 2
    assert config.run_id == "0"
    assert config.project == "deepracer-0"
    assert config.host_x is False
    assert config.docker_style == "compose"
    assert config.sharing == "exclusive"
    assert [s.text for s in config.trainer_devices.selectors] == ["0"]
    assert [s.kind for s in config.simulator_devices.selectors] == [SelectorKind.INDEX]


def test_records_the_line_of_each_key(system_env: Path) -> None:
    config = read_settings(Inputs(system_env))
    assert config.where("DR_WORKERS") == f"DR_WORKERS ({system_env}:4)"
    assert config.where("DRGPU_SHARING") == "DRGPU_SHARING"


def test_run_env_beside_system_env_is_layered_on_top(system_env: Path) -> None:
    write(system_env.with_name("run.env"), "DR_RUN_ID=7\nDR_ROBOMAKER_CUDA_DEVICES=\n")
    config = read_settings(Inputs(system_env))
    assert config.run_id == "7"
    assert config.simulator_devices == NO_GPU
    assert config.workers == 2
    assert str(config.origins["DR_RUN_ID"]) == f"{system_env.with_name('run.env')}:1"


def test_explicit_run_env_replaces_the_one_beside(system_env: Path, tmp_path: Path) -> None:
    write(system_env.with_name("run.env"), "DR_RUN_ID=beside\n")
    other = write(tmp_path / "other.env", "DR_RUN_ID=other\n")
    assert read_settings(Inputs(system_env, other)).run_id == "other"


def test_a_named_run_env_that_is_missing_is_a_config_error(
    system_env: Path, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="no run settings file"):
        read_settings(Inputs(system_env, tmp_path / "absent.env"))


def test_run_env_interpolates_values_of_system_env(system_env: Path) -> None:
    system_env.write_text("DR_RUN_ID=abc\n")
    system_env.with_name("run.env").write_text("DR_X=${DR_RUN_ID}-x\n")
    assert read_settings(Inputs(system_env)).values["DR_X"] == "abc-x"


def test_missing_system_env_is_a_config_error_with_a_hint(tmp_path: Path) -> None:
    error = config_error(tmp_path / "system.env")
    assert error.message == f"no settings file at {tmp_path / 'system.env'}"
    assert error.hint is not None and "system.env.example" in error.hint


def test_os_environ_is_neither_read_nor_changed(
    system_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DR_RUN_ID", "from-environment")
    monkeypatch.delenv("DR_WORKERS", raising=False)
    before = dict(os.environ)
    config = read_settings(Inputs(system_env))
    assert dict(os.environ) == before
    assert config.run_id == "0"


def test_values_are_interpolated_within_the_file(tmp_path: Path) -> None:
    env = write(tmp_path / "system.env", "DR_RUN_ID=abc\nDR_OTHER=${DR_RUN_ID}-x\n")
    assert read_settings(Inputs(env)).values["DR_OTHER"] == "abc-x"


def test_other_dr_keys_pass_through_in_values(system_env: Path) -> None:
    assert read_settings(Inputs(system_env)).values["DR_LOCAL_S3_BUCKET"] == "bucket"


def test_values_cannot_be_changed(system_env: Path) -> None:
    config = read_settings(Inputs(system_env))
    with pytest.raises(TypeError):
        config.values["DR_RUN_ID"] = "1"  # type: ignore[index]


def test_defaults_when_keys_are_absent(tmp_path: Path) -> None:
    config = read_settings(Inputs(write(tmp_path / "system.env", "# nothing\n")))
    assert (config.run_id, config.workers, config.host_x, config.docker_style) == (
        "0",
        1,
        False,
        "compose",
    )
    assert not config.wants_gpu


def test_wants_gpu_when_either_key_asks(tmp_path: Path) -> None:
    config = read_settings(
        Inputs(write(tmp_path / "system.env", "DR_ROBOMAKER_CUDA_DEVICES=all\n"))
    )
    assert config.simulator_devices == DeviceRequest(all=True)
    assert config.wants_gpu


@pytest.mark.parametrize(
    ("text", "expected"),
    [("true", True), ("True", True), ("1", True), ("false", False), ("0", False), ("", False)],
)
def test_host_x_reads_common_booleans(tmp_path: Path, text: str, expected: bool) -> None:
    config = read_settings(Inputs(write(tmp_path / "system.env", f"DR_HOST_X={text}\n")))
    assert config.host_x is expected


def test_misspelt_drgpu_key_suggests_the_right_one(tmp_path: Path) -> None:
    env = write(tmp_path / "system.env", "DR_RUN_ID=0\nDR_WORKERS=1\nDRGPU_SHARIN=exclusive\n")
    error = config_error(env)
    assert error.message == (
        f"{env}:3: DRGPU_SHARIN: unknown drgpu setting; did you mean DRGPU_SHARING?"
    )
    assert error.message.split(": ")[0].endswith("system.env:3")


def test_unknown_drgpu_key_without_a_close_match(tmp_path: Path) -> None:
    error = config_error(write(tmp_path / "system.env", "DRGPU_XYZZY=1\n"))
    assert error.message.endswith("DRGPU_XYZZY: unknown drgpu setting")


def test_error_in_run_env_names_run_env_and_its_line(system_env: Path) -> None:
    write(system_env.with_name("run.env"), "# run settings\nDR_WORKERS=many\n")
    error = config_error(system_env)
    assert error.message.startswith(f"{system_env.with_name('run.env')}:2: DR_WORKERS: ")


def test_workers_may_have_more_leading_zeros_than_python_converts(tmp_path: Path) -> None:
    env = write(
        tmp_path / "system.env",
        f"DR_WORKERS={'0' * 5000}2\nDRGPU_MPS_SAGEMAKER_THREADS={'0' * 5000}50\n",
    )
    config = read_settings(Inputs(env))
    assert (config.workers, config.mps_sagemaker_threads) == (2, 50)


@pytest.mark.parametrize("workers", ["0", "-1", "two", "1.5", "²", "65", "99999999999"])
def test_workers_must_be_a_whole_number_from_one_to_the_bound(tmp_path: Path, workers: str) -> None:
    env = write(tmp_path / "system.env", f"DR_RUN_ID=0\nDR_WORKERS={workers}\n")
    error = config_error(env)
    assert error.message == (f"{env}:2: DR_WORKERS: {workers!r} is not a whole number from 1 to 64")


@pytest.mark.parametrize("run_id", ["a%b", "Run", "-x", "x.y", "é"])
def test_run_id_must_be_a_compose_project_suffix(tmp_path: Path, run_id: str) -> None:
    env = write(tmp_path / "system.env", f"DR_RUN_ID={run_id}\n")
    assert config_error(env).message == (
        f"{env}:1: DR_RUN_ID: {run_id!r} must be lowercase letters, digits, '-' or '_'"
    )


@pytest.mark.parametrize("run_id", ["0", "12", "my-run_2"])
def test_run_id_names_the_project(tmp_path: Path, run_id: str) -> None:
    config = read_settings(Inputs(write(tmp_path / "system.env", f"DR_RUN_ID={run_id}\n")))
    assert config.project == f"deepracer-{run_id}"


def test_swarm_is_a_docker_style(tmp_path: Path) -> None:
    config = read_settings(Inputs(write(tmp_path / "system.env", "DR_DOCKER_STYLE=Swarm\n")))
    assert config.docker_style == "swarm"


def test_unknown_docker_style_is_refused(tmp_path: Path) -> None:
    error = config_error(write(tmp_path / "system.env", "DR_DOCKER_STYLE=kubernetes\n"))
    assert "'kubernetes' is not one of compose, swarm" in error.message


def test_unknown_sharing_mode_is_refused(tmp_path: Path) -> None:
    error = config_error(write(tmp_path / "system.env", "DRGPU_SHARING=shared\n"))
    assert error.message.endswith("DRGPU_SHARING: 'shared' is not one of exclusive, timeslice, mps")


def test_bad_host_x_is_refused(tmp_path: Path) -> None:
    error = config_error(write(tmp_path / "system.env", "DR_HOST_X=maybe\n"))
    assert error.message.endswith("DR_HOST_X: 'maybe' is not true or false")


def test_bad_device_value_names_file_line_and_the_fix(tmp_path: Path) -> None:
    env = write(tmp_path / "system.env", "DR_RUN_ID=0\nDR_SAGEMAKER_CUDA_DEVICES=1,,2\n")
    assert config_error(env).message == (
        f"{env}:2: DR_SAGEMAKER_CUDA_DEVICES: '1,,2' has an empty entry between commas: write '1,2'"
    )


def test_export_prefix_and_quotes_are_understood(tmp_path: Path) -> None:
    env = write(tmp_path / "system.env", "export DR_RUN_ID=\"5\"\nDR_WORKERS='3'\n")
    config: Config = read_settings(Inputs(env))
    assert (config.run_id, config.workers) == ("5", 3)
    assert str(config.origins["DR_RUN_ID"]) == f"{env}:1"


def test_example_settings_file_loads(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[3] / "system.env.example"
    config = read_settings(Inputs(example))
    assert config.project == "deepracer-0"
    assert config.values["DR_SIMAPP_VERSION"] == "5.3.3-gpu"


# --- sharing, workers, MPS limits -------------------------------------------------------------


def test_sharing_modes_and_worker_placement_are_read(tmp_path: Path) -> None:
    env = write(tmp_path / "system.env", "DRGPU_SHARING=TimeSlice\nDRGPU_WORKER_PLACEMENT=pack\n")
    config = read_settings(Inputs(env))
    assert (config.sharing, config.worker_placement) == ("timeslice", "pack")


def test_defaults_of_sharing_placement_and_mps(tmp_path: Path) -> None:
    config = read_settings(Inputs(write(tmp_path / "system.env", "# nothing\n")))
    assert (config.sharing, config.worker_placement) == ("exclusive", "spread")
    assert config.mps_image == DEFAULT_MPS_IMAGE
    assert config.mps_sagemaker_threads is config.mps_robomaker_memory is None


def test_unknown_worker_placement_is_refused(tmp_path: Path) -> None:
    error = config_error(write(tmp_path / "system.env", "DRGPU_WORKER_PLACEMENT=fill\n"))
    assert error.message.endswith("DRGPU_WORKER_PLACEMENT: 'fill' is not one of spread, pack")


def test_mps_limits_are_read_in_mps_units(tmp_path: Path) -> None:
    env = write(
        tmp_path / "system.env",
        """
        DRGPU_MPS_IMAGE=registry.local/cuda:12
        DRGPU_MPS_SAGEMAKER_THREADS=60
        DRGPU_MPS_ROBOMAKER_THREADS=20%
        DRGPU_MPS_SAGEMAKER_MEMORY=8G
        DRGPU_MPS_ROBOMAKER_MEMORY=1536M
        """,
    )
    config = read_settings(Inputs(env))
    assert (config.mps_image, config.mps_sagemaker_threads, config.mps_robomaker_threads) == (
        "registry.local/cuda:12",
        60,
        20,
    )
    assert (config.mps_sagemaker_memory, config.mps_robomaker_memory) == (8192, 1536)


@pytest.mark.parametrize(
    ("text", "mib"), [("2G", 2048), ("2g", 2048), ("2048M", 2048), ("2GiB", 2048), ("512MB", 512)]
)
def test_mps_memory_accepts_g_and_m(tmp_path: Path, text: str, mib: int) -> None:
    config = read_settings(
        Inputs(write(tmp_path / "system.env", f"DRGPU_MPS_ROBOMAKER_MEMORY={text}\n"))
    )
    assert config.mps_robomaker_memory == mib


@pytest.mark.parametrize("text", ["0", "101", "-5", "half", "60.5"])
def test_mps_thread_percentage_must_be_1_to_100(tmp_path: Path, text: str) -> None:
    env = write(tmp_path / "system.env", f"DR_RUN_ID=0\nDRGPU_MPS_SAGEMAKER_THREADS={text}\n")
    error = config_error(env)
    assert error.message == (
        f"{env}:2: DRGPU_MPS_SAGEMAKER_THREADS: {text!r} is not a whole percentage from 1 to 100"
    )


@pytest.mark.parametrize("text", ["2", "2T", "0G", "2.5G", "lots"])
def test_mps_memory_must_be_a_size_in_m_or_g(tmp_path: Path, text: str) -> None:
    error = config_error(write(tmp_path / "system.env", f"DRGPU_MPS_ROBOMAKER_MEMORY={text}\n"))
    assert f"DRGPU_MPS_ROBOMAKER_MEMORY: {text!r} is not a memory size like 2G or 2048M" in (
        error.message
    )


def test_misspelt_new_key_suggests_the_right_one(tmp_path: Path) -> None:
    error = config_error(write(tmp_path / "system.env", "DRGPU_WORKER_PLACMENT=pack\n"))
    assert error.message.endswith("did you mean DRGPU_WORKER_PLACEMENT?")


def test_the_settings_table_system_env_example_and_docs_agree() -> None:
    """`SETTINGS` is the one declaration: every key is in system.env.example with its
    default (or an example value where it has none) and in docs/settings.md's table with
    its default and help; neither names a key the table lacks."""
    repo = Path(__file__).resolve().parents[3]
    example = (repo / "system.env.example").read_text()
    docs = (repo / "docs" / "settings.md").read_text()
    written = dict(re.findall(r"^(?:# )?((?:DR|DRGPU)_[A-Z0-9_]+)=(.*)$", example, re.M))
    tabled = set(re.findall(r"^\| `((?:DR|DRGPU)_[A-Z0-9_]+)` \|", docs, re.M))
    keys = {setting.key for setting in SETTINGS}
    for setting in SETTINGS:
        assert setting.key in written, setting.key
        assert not setting.default or written[setting.key].lower() == setting.default, setting
        default = f"`{setting.default}`" if setting.default else ""
        assert f"| `{setting.key}` | {default} | {setting.help} |" in docs, setting
    assert {key for key in written if not is_service_key(key)} == keys
    assert tabled == keys


@pytest.mark.parametrize("run_id", ["eval-1", "eval-", "eval-abc"])
def test_a_run_id_naming_an_evaluation_is_refused(tmp_path: Path, run_id: str) -> None:
    env = write(tmp_path / "system.env", f"DR_RUN_ID={run_id}\n")
    with pytest.raises(ConfigError, match="starts with 'eval-'") as refused:
        read_settings(Inputs(env))
    assert refused.value.exit_code == ExitCode.CONFIG
    assert refused.value.message.startswith(f"{env}:1: DR_RUN_ID: ")


def test_a_run_id_with_eval_elsewhere_is_a_run_id(tmp_path: Path) -> None:
    assert (
        read_settings(Inputs(write(tmp_path / "system.env", "DR_RUN_ID=my-eval-1\n"))).run_id
        == "my-eval-1"
    )
