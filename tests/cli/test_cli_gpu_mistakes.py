"""A DeepRacer-for-cloud user's first hour (issue 20): each mistake about GPUs is said in
one line naming what is wrong and what to write, on both example boxes; none passes in
silence. `plan` warns (exit 0), `up`, `render` and `drfc-env` refuse (exit 2)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli.conftest import REPO, Settings, assert_one_error_line
from tests.drfc import activated, make_checkout
from tests.plan_warnings import messages
from tests.support.runners import Cli

TOPOLOGIES = REPO / "tests" / "topologies"


@dataclass(frozen=True)
class Box:
    """A test box: its inventory file and the GPUs the tests name."""

    inventory: Path
    gpus: dict[int, str]  # nvidia-smi index -> name
    cuda: tuple[int, ...]  # the nvidia-smi index of each CUDA ordinal


# The GTX 1650 + Tesla M40 box (CUDA's order guessed), and the three-GPU box whose CUDA
# order (known) differs from nvidia-smi's: 0 = GTX 1650, 1 = RTX 3090, 2 = Tesla M40.
GTX_M40 = Box(
    TOPOLOGIES / "gtx1650-m40.json", {0: "Tesla M40 24GB", 1: "NVIDIA GeForce GTX 1650"}, (1, 0)
)
THREE = Box(
    TOPOLOGIES / "gtx1650-rtx3090-m40-orders.json",
    {0: "NVIDIA GeForce GTX 1650", 1: "NVIDIA GeForce RTX 3090", 2: "Tesla M40 24GB"},
    (1, 0, 2),
)
BOXES = pytest.mark.parametrize("box", [GTX_M40, THREE], ids=["gtx1650-m40", "three-gpus"])


def warnings_of(err: str) -> list[str]:
    """The warning lines of stderr, without their `drgpu: warning: ` mark."""
    mark = "drgpu: warning: "
    return [line.removeprefix(mark) for line in err.splitlines() if line.startswith(mark)]


# --- 1. keys that look like GPU keys but are none ------------------------------------------

MISTAKES = {
    "typo": ("DR_SAGEMAKR_CUDA_DEVICES", "DR_SAGEMAKER_CUDA_DEVICES"),
    "missing S": ("DR_ROBOMAKER_CUDA_DEVICE", "DR_ROBOMAKER_CUDA_DEVICES"),
    "lower case": ("dr_sagemaker_cuda_devices", "DR_SAGEMAKER_CUDA_DEVICES"),
    "drgpu alias in lower case": ("drgpu_simulator_devices", "DRGPU_SIMULATOR_DEVICES"),
    "GPU for CUDA_DEVICES": ("DR_ROBOMAKER_GPUS", "DR_ROBOMAKER_CUDA_DEVICES"),
}


@BOXES
@pytest.mark.parametrize(("written", "meant"), MISTAKES.values(), ids=MISTAKES.keys())
def test_a_mistyped_gpu_key_is_named_with_the_key_meant(
    cli: Cli, settings: Settings, box: Box, written: str, meant: str
) -> None:
    env = settings(DR_WORKERS="1", **{written: "0"})
    line = (
        f"{env}:2: {written} is not a GPU key drgpu or DeepRacer-for-cloud reads;"
        f" did you mean {meant}?"
    )
    planned = cli("plan", "--env-file", env, "--inventory", box.inventory, "--json")
    assert planned.code == 0
    assert line in warnings_of(planned.err)
    assert line in messages(json.loads(planned.out))
    # `up` has no --inventory: it refuses before it reads this host's GPUs.
    for refused in (
        cli("render", "--env-file", env, "--inventory", box.inventory),
        cli("up", "--env-file", env),
    ):
        assert refused.code == 2, refused.err
        assert refused.err.splitlines()[-2:] == [
            f"drgpu: error: {line}",
            "  hint: fix the key (`drgpu plan` lists every such key); see system.env.example",
        ]


@pytest.mark.parametrize("key", ["CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"])
def test_a_container_variable_in_the_settings_names_the_keys_to_use(
    cli: Cli, settings: Settings, key: str
) -> None:
    env = settings(**{key: "1"})
    line = (
        f"{env}:1: {key} is not read from the settings: drgpu sets it in each container;"
        " write DR_SAGEMAKER_CUDA_DEVICES (the trainer) and DR_ROBOMAKER_CUDA_DEVICES"
        " (the simulators) instead"
    )
    planned = cli("plan", "--env-file", env, "--inventory", GTX_M40.inventory)
    assert planned.code == 0 and line in warnings_of(planned.err)
    refused = cli("render", "--env-file", env, "--inventory", GTX_M40.inventory)
    assert refused.code == 2 and assert_one_error_line(refused) == f"drgpu: error: {line}"


def test_drfc_env_refuses_a_mistyped_key(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = make_checkout(tmp_path / "drfc", DR_SAGEMAKR_CUDA_DEVICES="1")
    for key in [key for key in __import__("os").environ if key.startswith("DR_")]:
        monkeypatch.delenv(key)
    for key, value in activated(checkout).items():
        monkeypatch.setenv(key, value)
    result = cli("drfc-env")
    assert result.code == 2
    assert "DR_SAGEMAKR_CUDA_DEVICES is not a GPU key" in assert_one_error_line(result)


def test_deepracer_for_clouds_own_keys_are_never_taken_for_mistakes(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = make_checkout(tmp_path / "drfc")
    for key in [key for key in __import__("os").environ if key.startswith("DR_")]:
        monkeypatch.delenv(key)
    for key, value in activated(checkout).items():
        monkeypatch.setenv(key, value)
    result = cli("plan", "--inventory", THREE.inventory)
    assert result.code == 0, result.err
    assert not [line for line in warnings_of(result.err) if "is not a GPU key" in line]


# --- 2. the trainer is never on the CPU by accident ----------------------------------------


@BOXES
def test_an_unset_trainer_key_gives_the_trainer_a_gpu_and_says_so(
    cli: Cli, settings: Settings, box: Box
) -> None:
    env = settings(DR_ROBOMAKER_CUDA_DEVICES="0")
    result = cli("plan", "--env-file", env, "--inventory", box.inventory, "--json")
    assert result.code == 0, result.err
    document = json.loads(result.out)
    trainer = document["services"]["sagemaker"]["gpus"]
    assert len(trainer) == 1 and trainer[0]["index"] != 0  # the simulator's stays its own
    index, name = trainer[0]["index"], box.gpus[trainer[0]["index"]]
    line = (
        f"DR_SAGEMAKER_CUDA_DEVICES is not set: the trainer gets GPU {index} ({name}), as"
        " `auto` chooses (DeepRacer-for-cloud would give it every GPU);"
        " set DR_SAGEMAKER_CUDA_DEVICES to choose"
    )
    assert line in messages(document)
    table = cli("plan", "--env-file", env, "--inventory", box.inventory)
    assert line in warnings_of(table.err)
    assert f"{index}: {name}" in table.out


@BOXES
@pytest.mark.parametrize("value", ["none", ""])
def test_a_trainer_on_the_cpu_of_a_box_with_gpus_is_warned(
    cli: Cli, settings: Settings, box: Box, value: str
) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES=value, DR_ROBOMAKER_CUDA_DEVICES="0")
    result = cli("plan", "--env-file", env, "--inventory", box.inventory)
    assert result.code == 0
    written = value or "empty"
    assert (
        f"the trainer runs on the CPU (DR_SAGEMAKER_CUDA_DEVICES ({env}:1)={written}) though"
        f" this machine has {len(box.gpus)} GPU(s): DeepRacer training on a CPU takes days,"
        " not hours; set DR_SAGEMAKER_CUDA_DEVICES to its GPU(s), or auto"
    ) in warnings_of(result.err)
    assert "none (CPU only)" in result.out


@BOXES
def test_an_unset_trainer_key_with_every_gpu_taken_runs_on_the_cpu_said(
    cli: Cli, settings: Settings, box: Box
) -> None:
    everything = ",".join(map(str, box.gpus))
    env = settings(DR_ROBOMAKER_CUDA_DEVICES=everything, DR_WORKERS=str(len(box.gpus)))
    result = cli("plan", "--env-file", env, "--inventory", box.inventory)
    assert result.code == 0
    assert any(
        line.startswith("DR_SAGEMAKER_CUDA_DEVICES is not set and no GPU is free for the trainer")
        and "it runs on the CPU, days instead of hours" in line
        for line in warnings_of(result.err)
    )


# --- 3. the order warning tells the truth --------------------------------------------------


def test_the_order_warning_names_each_orders_gpu_with_its_numbers(
    cli: Cli, settings: Settings
) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="2", DR_ROBOMAKER_CUDA_DEVICES="0")
    result = cli("plan", "--env-file", env, "--inventory", THREE.inventory)
    assert result.code == 0
    (warning,) = [line for line in warnings_of(result.err) if line.startswith("CUDA's order")]
    assert warning.startswith(
        "CUDA's order differs from nvidia-smi's here: DR_ROBOMAKER_CUDA_DEVICES=0: nvidia-smi's"
        " GPU 0 is the NVIDIA GeForce GTX 1650 (CUDA's 1), CUDA's GPU 0 the NVIDIA GeForce"
        " RTX 3090 (nvidia-smi's 1); drgpu reads nvidia-smi's"
    )
    assert "DR_SAGEMAKER_CUDA_DEVICES=2" not in warning  # the M40 is 2 in both orders


def test_render_refuses_an_index_whose_gpu_depends_on_an_unchosen_order(
    cli: Cli, settings: Settings
) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="2")
    result = cli("render", "--env-file", env, "--inventory", THREE.inventory)
    assert result.code == 2
    line = assert_one_error_line(result)
    assert "which GPU order do bare indices use? CUDA's order differs" in line
    assert "nvidia-smi's GPU 0 is the NVIDIA GeForce GTX 1650 (CUDA's 1), CUDA's GPU 0" in line
    assert "hint: write DRGPU_INDEX_ORDER=pci (nvidia-smi's) or =cuda" in result.err
    chosen = settings(DR_SAGEMAKER_CUDA_DEVICES="0", DRGPU_INDEX_ORDER="cuda")
    assert cli("render", "--env-file", chosen, "--inventory", THREE.inventory).code == 0


@BOXES
def test_a_written_pci_order_is_not_warned_again(cli: Cli, settings: Settings, box: Box) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="1", DRGPU_INDEX_ORDER="pci")
    result = cli("plan", "--env-file", env, "--inventory", box.inventory)
    assert result.code == 0
    assert not [line for line in warnings_of(result.err) if "CUDA's order" in line]
    assert "why bare indices read in nvidia-smi's order (DRGPU_INDEX_ORDER=pci)" in result.out
    unset = cli("plan", "--env-file", settings(DR_SAGEMAKER_CUDA_DEVICES="1"), "--inventory",
                box.inventory)  # fmt: skip
    assert [line for line in warnings_of(unset.err) if line.startswith("CUDA's order")]


def test_in_cuda_order_the_table_its_footnote_and_json_agree(cli: Cli, settings: Settings) -> None:
    env = settings(
        DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1", DRGPU_INDEX_ORDER="cuda"
    )
    table = cli("plan", "--env-file", env, "--inventory", THREE.inventory)
    document = json.loads(
        cli("plan", "--env-file", env, "--inventory", THREE.inventory, "--json").out
    )
    # CUDA's 0 is the RTX 3090, nvidia-smi's 1; CUDA's 1 the GTX 1650, nvidia-smi's 0.
    assert [g["index"] for g in document["services"]["sagemaker"]["gpus"]] == [1]
    assert [g["index"] for g in document["services"]["robomaker"]["gpus"]] == [0]
    assert "1: NVIDIA GeForce RTX 3090" in table.out
    note = document["index_order"]
    assert "read in CUDA's default fastest-first order (DRGPU_INDEX_ORDER=cuda)" in note
    assert "the GPUs shown here carry nvidia-smi's index" in note
    assert " ".join(note.split()[:6]) in " ".join(table.out.split())


@BOXES
def test_torchs_device_string_is_answered_with_the_nvidia_smi_index_to_write(
    cli: Cli, settings: Settings, box: Box
) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="cuda:0")
    result = cli("plan", "--env-file", env, "--inventory", box.inventory)
    assert result.code == 2
    index = box.cuda[0]
    guessed = "" if box is THREE else " (CUDA's order guessed)"
    assert assert_one_error_line(result).startswith(
        f"drgpu: error: DR_SAGEMAKER_CUDA_DEVICES ({env}:1): 'cuda:0' is torch's device string,"
        f" not a device list: CUDA's GPU 0{guessed} is the {box.gpus[index]}: write its"
        f" nvidia-smi index '{index}' or its UUID GPU-"
    )


# --- 4. hints that fit the error -----------------------------------------------------------


@BOXES
def test_both_roles_on_one_gpu_hint_at_another_gpu_or_timeslice(
    cli: Cli, settings: Settings, box: Box
) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="1", DR_ROBOMAKER_CUDA_DEVICES="1")
    result = cli("plan", "--env-file", env, "--inventory", box.inventory)
    assert result.code == 3
    line = assert_one_error_line(result)
    assert f"1: {box.gpus[1]}" in line and "asked for by both the trainer" in line
    assert result.err.splitlines()[1] == (
        "  hint: give the trainer or the simulator another GPU, or set DRGPU_SHARING=timeslice"
        " to let them share it"
    )


@BOXES
def test_a_gpu_that_does_not_exist_lists_the_boxs_gpus(
    cli: Cli, settings: Settings, box: Box
) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="7")
    result = cli("plan", "--env-file", env, "--inventory", box.inventory)
    assert result.code == 3
    line = assert_one_error_line(result)
    assert "no GPU matches '7'; this machine has 0: " in line
    assert all(f"{index}: {name} (" in line for index, name in box.gpus.items())
    assert result.err.splitlines()[1] == (
        "  hint: `drgpu gpus` lists this machine's GPUs; a bare index is nvidia-smi's"
    )


def test_no_nvml_hints_at_an_inventory_file(
    cli: Cli, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LD_LIBRARY_PATH", "/nonexistent")
    result = cli("plan", "--env-file", settings(DR_SAGEMAKER_CUDA_DEVICES="0"))
    if result.code == 0:
        pytest.skip("this machine has NVML")
    assert result.code == 4
    assert_one_error_line(result)
    assert result.err.splitlines()[1].endswith(
        "; or plan for a machine described in a file: --inventory FILE"
    )


def test_on_swarm_too_the_footnote_says_how_indices_were_read(cli: Cli, settings: Settings) -> None:
    env = settings(DR_SAGEMAKER_CUDA_DEVICES="0", DRGPU_INDEX_ORDER="cuda", DR_DOCKER_STYLE="swarm")
    result = cli("plan", "--env-file", env, "--inventory", THREE.inventory)
    assert result.code == 0, result.err
    assert "bare indices in the settings are read in CUDA's" in " ".join(result.out.split())
