"""Generated input through the whole CLI (`drgpu plan`, in-process): the device grammar,
the inventory reader and the settings loader never crash, exit only with documented
codes, say what is wrong in one line, leave the user's files byte-identical and print
no secret. Budget: PROPERTY in helpers (a few seconds each; fixed examples in CI)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.adversarial.helpers import GTX_M40, PROPERTY, SECRET, assert_sound
from tests.support.runners import run_main

PLAN_CODES = (0, 2, 3, 4)


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    """One folder for the whole module (hypothesis runs many examples per test)."""
    path = Path(tempfile.mkdtemp(prefix="drgpu-props-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("DRGPU_DEBUG", raising=False)


def plan_with(folder: Path, settings: bytes, inventory: bytes | None = None) -> None:
    """`drgpu plan` over these files: sound, and the files unchanged."""
    env = folder / "system.env"
    env.write_bytes(settings)
    inventory_file = GTX_M40
    if inventory is not None:
        inventory_file = folder / "inventory.json"
        inventory_file.write_bytes(inventory)
    before = inventory_file.read_bytes()
    for args in ((), ("--json",)):
        ran = run_main("plan", "--env-file", env, "--inventory", inventory_file, *args)
        assert_sound(ran, *PLAN_CODES)
        assert env.read_bytes() == settings
        assert inventory_file.read_bytes() == before


def secret_line() -> bytes:
    return f"AWS_SECRET_ACCESS_KEY={SECRET}\n".encode()


# --- the device grammar -------------------------------------------------------------------

TOKEN = st.one_of(
    st.integers(min_value=-3, max_value=10**6).map(str),
    st.text(alphabet="0123456789", min_size=1, max_size=5000),
    st.sampled_from(["all", "auto", "none", "void", "cuda:0", "GPU-", "MIG-", "81:00.0"]),
    st.from_regex(r"(GPU|MIG)-[0-9a-f-]{0,40}", fullmatch=True),
    st.from_regex(r"[0-9a-fA-F]{0,8}:?[0-9a-fA-F]{1,3}:[0-9a-fA-F]{1,3}\.[0-9]", fullmatch=True),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=20),
)
DEVICES = st.lists(TOKEN, max_size=6).map(",".join)


@PROPERTY
@given(trainer=DEVICES, simulator=DEVICES)
def test_any_device_values_plan_soundly(folder: Path, trainer: str, simulator: str) -> None:
    text = f"DR_SAGEMAKER_CUDA_DEVICES={trainer}\nDR_ROBOMAKER_CUDA_DEVICES={simulator}\n"
    plan_with(folder, secret_line() + text.encode("utf-8", "surrogatepass"))


# --- the inventory reader -----------------------------------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
GPU_KEYS = st.sampled_from(
    [
        "index",
        "uuid",
        "name",
        "pci_bus_id",
        "memory_total_mib",
        "memory_used_mib",
        "compute_capability",
        "utilization_gpu_percent",
        "mig_mode",
        "mig_devices",
        "processes",
        "graphics_processes",
        "error",
    ]
)


@st.composite
def inventories(draw: st.DrawFn) -> Any:
    """A real inventory with some of its fields replaced by anything JSON can hold."""
    document = json.loads(GTX_M40.read_text())
    for gpu in document["gpus"]:
        for key in draw(st.lists(GPU_KEYS, max_size=3)):
            gpu[key] = draw(JSON)
    if draw(st.booleans()):
        document["gpus"].append(draw(st.sampled_from(document["gpus"])))
    if draw(st.booleans()):
        document[draw(st.sampled_from(["cuda_driver_version", "gpus", "init_error"]))] = draw(JSON)
    return document


@PROPERTY
@given(document=inventories(), devices=st.sampled_from(["0", "1", "0,1", "all", "auto", ""]))
def test_any_inventory_plans_soundly(folder: Path, document: Any, devices: str) -> None:
    text = json.dumps(document, allow_nan=True).encode()
    plan_with(folder, secret_line() + f"DR_SAGEMAKER_CUDA_DEVICES={devices}\n".encode(), text)


@PROPERTY
@given(raw=st.binary(max_size=300) | JSON.map(lambda value: json.dumps(value).encode()))
def test_any_inventory_bytes_plan_soundly(folder: Path, raw: bytes) -> None:
    plan_with(folder, secret_line() + b"DR_SAGEMAKER_CUDA_DEVICES=0\n", raw)


# --- the settings loader (through read_settings and the CLI) --------------------------------

KEYS = st.sampled_from(
    [
        "DR_RUN_ID",
        "DR_WORKERS",
        "DR_HOST_X",
        "DR_DOCKER_STYLE",
        "DR_SAGEMAKER_CUDA_DEVICES",
        "DR_ROBOMAKER_CUDA_DEVICES",
        "DRGPU_SHARING",
        "DRGPU_WORKER_PLACEMENT",
        "DRGPU_MPS_SAGEMAKER_THREADS",
        "DRGPU_MPS_ROBOMAKER_MEMORY",
        "DRGPU_LOCK_TIMEOUT",
        "DRGPU_UNKNOWN",
        "MY_TOKEN",
    ]
)
VALUES = st.one_of(
    st.text(max_size=30),
    st.text(alphabet="0123456789", max_size=5000),
    st.sampled_from(["${AWS_SECRET_ACCESS_KEY}", "$AWS_SECRET_ACCESS_KEY", '"1', "'a", "#"]),
)
LINES = st.one_of(
    st.tuples(KEYS, VALUES).map(lambda pair: f"{pair[0]}={pair[1]}"),
    st.text(max_size=40),
)


@PROPERTY
@given(lines=st.lists(LINES, max_size=8))
def test_any_settings_file_plans_soundly(folder: Path, lines: list[str]) -> None:
    text = "\n".join(["DR_SAGEMAKER_CUDA_DEVICES=0", *lines]) + "\n"
    plan_with(folder, secret_line() + text.encode("utf-8", "surrogatepass"))


@PROPERTY
@given(raw=st.binary(max_size=400))
def test_any_settings_bytes_plan_soundly(folder: Path, raw: bytes) -> None:
    plan_with(folder, secret_line() + raw)
