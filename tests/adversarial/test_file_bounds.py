"""Every file drgpu reads is a regular file under a bound, refused before it is read
(issue 23, defect 7): /dev/zero, a FIFO, a socket, a huge sparse file; outputs are never
read back whole nor opened in a way that waits on a FIFO; settings expansion is bounded.
FIFO cases run drgpu in a subprocess with a timeout: a read that waits hangs forever."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drgpu.core.envfile import MAX_TOTAL_LENGTH, MAX_VALUE_LENGTH, read_env_texts
from drgpu.errors import ConfigError, ExitCode
from drgpu.host.files import Bound
from tests.adversarial.helpers import GTX_M40, PROPERTY, SECRET, assert_sound
from tests.support.runners import run_drgpu, run_main

pytestmark = pytest.mark.usefixtures("no_engine")


@pytest.fixture
def env(tmp_path: Path) -> Path:
    path = tmp_path / "system.env"
    path.write_text(f"AWS_SECRET_ACCESS_KEY={SECRET}\nDR_SAGEMAKER_CUDA_DEVICES=1\n")
    return path


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "sock"
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(str(path))
    yield path
    listening.close()


def sparse(path: Path, size: int) -> Path:
    with path.open("wb") as stream:
        stream.truncate(size)
    return path


def quick(*args: str | Path) -> tuple[int, str]:
    """drgpu in a subprocess that must end within 30 s (a FIFO read would wait forever)."""
    ran = run_drgpu(*map(str, args), timeout=30)
    assert "Traceback" not in ran.stderr
    return ran.returncode, ran.stderr


# --- inputs: the inventory, the compose files, the settings ----------------------------------


def test_dev_zero_as_inventory_is_refused_before_reading(env: Path) -> None:
    ran = run_main("plan", "--env-file", env, "--inventory", "/dev/zero")
    assert_sound(ran, ExitCode.CONFIG)
    assert "inventory /dev/zero is a character device, not a regular file" in ran.err


def test_dev_zero_as_compose_file_is_refused(env: Path) -> None:
    ran = run_main("plan", "--env-file", env, "--inventory", GTX_M40, "-f", "/dev/zero")
    assert_sound(ran, ExitCode.CONFIG)
    assert "compose file /dev/zero is a character device" in ran.err


@pytest.mark.parametrize("option", ["--inventory", "-f", "--env-file"])
def test_a_fifo_as_input_is_refused_without_waiting(env: Path, fifo: Path, option: str) -> None:
    args = {"--inventory": ("--env-file", env), "-f": ("--env-file", env)}.get(option, ())
    inventory = () if option == "--inventory" else ("--inventory", GTX_M40)
    code, err = quick("plan", *args, *inventory, option, fifo)
    assert code == ExitCode.CONFIG, err
    assert f"{fifo} is a FIFO (named pipe), not a regular file" in err


def test_a_socket_as_inventory_is_refused(env: Path, unix_socket: Path) -> None:
    ran = run_main("plan", "--env-file", env, "--inventory", unix_socket)
    assert_sound(ran, ExitCode.CONFIG)
    assert f"cannot read inventory {unix_socket}" in ran.err


@pytest.mark.parametrize(
    ("option", "bound", "name"),
    [
        ("--inventory", Bound.INVENTORY, "inventory"),
        ("-f", Bound.COMPOSE, "compose file"),
        ("--env-file", Bound.SETTINGS, "settings file"),
    ],
)
def test_a_huge_sparse_file_is_refused_naming_the_bound(
    env: Path, tmp_path: Path, option: str, bound: Bound, name: str
) -> None:
    huge = sparse(tmp_path / "huge", 8 * 1024**3)
    inventory = () if option == "--inventory" else ("--inventory", GTX_M40)
    settings = () if option == "--env-file" else ("--env-file", env)
    started = time.monotonic()
    ran = run_main("plan", *settings, *inventory, option, huge)
    assert time.monotonic() - started < 5
    assert_sound(ran, ExitCode.CONFIG)
    shown = f"{bound // 1024**2} MiB"
    assert f"{name} {huge} is larger than {shown}" in ran.err


def test_a_compose_file_just_under_its_bound_is_read_in_sane_time(
    env: Path, tmp_path: Path
) -> None:
    padding = "# " + "x" * 1021 + "\n"
    services = "services:\n  sagemaker:\n    image: busybox\n"
    stack = tmp_path / "big.yml"
    stack.write_text(services + padding * ((Bound.COMPOSE - 200) // len(padding)))
    started = time.monotonic()
    ran = run_main("plan", "--env-file", env, "--inventory", GTX_M40, "-f", stack)
    assert_sound(ran, ExitCode.OK)
    assert time.monotonic() - started < 10  # 4 MiB took 6 s, 10 MB over 20 s


def test_a_compose_file_of_10_mb_is_refused_at_once(env: Path, tmp_path: Path) -> None:
    stack = tmp_path / "ten.yml"
    stack.write_text("services:\n  sagemaker:\n    image: busybox\n" + "# x\n" * 2_600_000)
    started = time.monotonic()
    ran = run_main("plan", "--env-file", env, "--inventory", GTX_M40, "-f", stack)
    assert time.monotonic() - started < 5
    assert_sound(ran, ExitCode.CONFIG)
    assert "is larger than 1 MiB" in ran.err


def test_daemon_json_from_dev_zero_or_a_fifo_is_a_finding_not_a_memory_error(
    env: Path, fifo: Path
) -> None:
    for daemon_json in ("/dev/zero", fifo):
        code, err = quick(
            "swarm-setup",
            "--inventory",
            GTX_M40,
            "--env-file",
            env,
            "--daemon-json",
            daemon_json,
            "--toolkit-config",
            fifo,
        )
        assert code in (ExitCode.CHECK_FAILED, ExitCode.DOCKER), err


# --- settings whose expansion has no end ---------------------------------------------------


def test_a_doubling_setting_is_refused_naming_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "system.env"
    path.write_text("A=" + "x" * 64 + "\n" + "A=$A$A\n" * 40 + "DR_SAGEMAKER_CUDA_DEVICES=1\n")
    started = time.monotonic()
    ran = run_main("plan", "--env-file", path, "--inventory", GTX_M40)
    assert time.monotonic() - started < 5
    assert_sound(ran, ExitCode.CONFIG)
    assert f"{path}:13: A: the value expands to more than {MAX_VALUE_LENGTH}" in ran.err


def test_many_long_settings_are_refused_naming_the_total_bound(tmp_path: Path) -> None:
    path = tmp_path / "system.env"
    long_value = "A=" + "y" * 1000 + "\n" + "A=$A$A$A$A$A$A$A$A\n" * 2 + "A=$A$A\n"
    path.write_text(long_value + "".join(f"B{i}=x$A\n" for i in range(40)))
    ran = run_main("plan", "--env-file", path, "--inventory", GTX_M40)
    assert_sound(ran, ExitCode.CONFIG)
    assert f"the settings expand to more than {MAX_TOTAL_LENGTH} characters" in ran.err


# --- outputs: never read whole, never waited on --------------------------------------------


def test_render_to_a_fifo_is_refused_without_waiting(env: Path, fifo: Path) -> None:
    code, err = quick("render", "--env-file", env, "--inventory", GTX_M40, "-o", fifo)
    assert code == ExitCode.CONFIG, err
    assert f"refusing to write {fifo}: it is not a regular file" in err


def test_render_to_dev_null_is_refused(env: Path) -> None:
    ran = run_main("render", "--env-file", env, "--inventory", GTX_M40, "-o", "/dev/null")
    assert_sound(ran, ExitCode.CONFIG)
    assert "refusing to write /dev/null: it is not a regular file" in ran.err


def test_an_override_path_that_is_a_fifo_is_refused_without_waiting(
    env: Path, tmp_path: Path
) -> None:
    (tmp_path / ".drgpu").mkdir()
    os.mkfifo(tmp_path / ".drgpu" / "deepracer-0.override.yml")
    code, err = quick(
        "render",
        "--env-file",
        env,
        "--inventory",
        GTX_M40,
        "-o",
        tmp_path / ".drgpu" / "deepracer-0.override.yml",
    )
    assert code == ExitCode.CONFIG, err
    assert "it is not a regular file" in err


def test_a_huge_sparse_render_target_with_drgpus_header_is_refused_unread(
    env: Path, tmp_path: Path
) -> None:
    """drgpu's header alone does not make a file drgpu's (its checksum line does): a 16 GiB
    file is refused at once, not read whole, and stays."""
    target = tmp_path / "out.yml"
    with target.open("wb") as stream:
        stream.write(b"# Written by drgpu for compose project deepracer-0.\n")
        stream.truncate(16 * 1024**3)
    started = time.monotonic()
    ran = run_main("render", "--env-file", env, "--inventory", GTX_M40, "-o", target)
    assert_sound(ran, ExitCode.CONFIG)
    assert f"refusing to overwrite {target}" in ran.err
    assert time.monotonic() - started < 5
    assert target.stat().st_size == 16 * 1024**3


# --- one way in: every read goes through drgpu/host/files.py ---------------------------------

READERS = {"read_text", "read_bytes", "open", "fdopen", "readline", "readlines"}
# Where a call of that name is no file read: the HTTP answer on the engine's socket, the
# probe (it runs inside a container, on its own), a tar archive in memory, a file drgpu
# writes through the descriptor mkstemp gave it, /dev/null for a left reader, the help text
# shipped beside drgpu/__main__.py.
ALLOWED = {
    "drgpu/host/files.py": READERS,
    "drgpu/probe.py": READERS,
    "drgpu/host/docker_api.py": {"readline"},
    "drgpu/host/engine.py": {"open"},
    "drgpu/host/state_files.py": {"fdopen"},
    "drgpu/cli.py": {"open"},
    "drgpu/__main__.py": {"open"},
}


def test_no_module_reads_a_file_but_host_files() -> None:
    import ast

    package = Path(__file__).resolve().parents[2] / "drgpu"
    found = []
    for module in sorted(package.rglob("*.py")):
        name = str(module.relative_to(package.parent))
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            called = node.func
            attribute = called.attr if isinstance(called, ast.Attribute) else None
            plain = called.id if isinstance(called, ast.Name) else None
            reader = attribute if attribute in READERS else plain if plain == "open" else None
            if reader and reader not in ALLOWED.get(name, set()):
                found.append(f"{name}:{node.lineno} {reader}")
    assert found == []


@PROPERTY
@given(
    seed=st.text(alphabet="xy", min_size=1, max_size=300),
    chain=st.lists(
        st.tuples(st.sampled_from(["A", "B"]), st.integers(min_value=1, max_value=12)),
        max_size=30,
    ),
)
def test_any_chain_of_references_stays_within_the_bounds(
    seed: str, chain: list[tuple[str, int]]
) -> None:
    """However values refer to each other, each stays within its bound, and an error
    names the bound: never the memory of the expansion."""
    lines = [f"A={seed}", f"B={seed}"]
    lines += [f"{key}=" + "$A$B" * copies for key, copies in chain]
    try:
        values = read_env_texts([(Path("system.env"), "\n".join(lines) + "\n")], {})[0]
    except ConfigError as error:
        assert str(MAX_VALUE_LENGTH) in error.message or str(MAX_TOTAL_LENGTH) in error.message
        return
    assert all(len(value) <= MAX_VALUE_LENGTH for value in values.values())
