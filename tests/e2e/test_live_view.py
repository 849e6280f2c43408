"""`drgpu status --watch` in a real terminal (tmux) on the bed: the live board shows the
bed's GPUs, the stack's services on their GPUs and the violations the test provokes (one
in NVML's process list before it starts, a stray host process shown by its command and
user, one by another run's container while it runs); at 120, 100 and 80 columns every
column that matters stays and no line is longer than the terminal; and Ctrl-C leaves the
terminal as it was (main screen, cursor shown, the exit code of the last refresh)."""

from __future__ import annotations

import copy
import functools
import os
import pwd
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import (
    SIMULATOR,
    SPARE,
    THREE_GPUS,
    TRAINER,
    container_of,
    service,
    write_env,
    write_stack,
)
from tests.support.runners import DRGPU_COMMAND, run_drgpu

pytestmark = pytest.mark.docker

RUN_ID = "live"
PROJECT = f"deepracer-{RUN_ID}"
INTRUDER = "drgpu-live-intruder"


class Terminal:
    """A tmux session of its own (private server socket), 200x50."""

    def __init__(self, name: str) -> None:
        self.socket = f"drgpu-test-{os.getpid()}-{name}"
        self.name = name

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout

    def start(self, script: Path) -> None:
        self.tmux("new-session", "-d", "-s", self.name, "-x", "200", "-y", "50", f"bash {script}")

    def screen(self) -> str:
        """The visible screen; a line the terminal wrapped is joined back into one (`-J`,
        which also keeps trailing spaces: they are cut)."""
        captured = self.tmux("capture-pane", "-p", "-J", "-t", self.name)
        return "".join(line.rstrip() + "\n" for line in captured.splitlines())

    def resize(self, width: int) -> None:
        self.tmux("resize-window", "-t", self.name, "-x", str(width), "-y", "50")

    def flag(self, name: str) -> str:
        return self.tmux("display-message", "-p", "-t", self.name, f"#{{{name}}}").strip()

    def wait_for(self, check: Callable[[str], bool], timeout_s: float = 60) -> str:
        deadline = time.monotonic() + timeout_s
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if check(screen):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"the terminal never showed what was expected:\n{screen}")

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)


@pytest.fixture
def terminal(request: pytest.FixtureRequest) -> Iterator[Terminal]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is missing (scripts/setup-test installs it)")
    term = Terminal(request.node.name[-20:].replace(".", "-"))
    yield term
    term.kill()


@pytest.fixture
def stack(bed: Any, tmp_path: Path) -> Iterator[tuple[Path, int, int]]:
    bed.set_topology(THREE_GPUS)
    compose = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": service(bed)})
    env_file = write_env(tmp_path, RUN_ID, trainer="1", simulator="0")
    try:
        started = run_drgpu("up", "--env-file", str(env_file), "-f", str(compose), env=bed.env())
        assert started.returncode == 0, started.stderr
        yield (
            env_file,
            container_of(bed, PROJECT, "sagemaker")["State"]["Pid"],
            container_of(bed, PROJECT, "robomaker")["State"]["Pid"],
        )
    finally:
        bed.docker("rm", "-f", INTRUDER, check=False)
        bed.cleanup_project(PROJECT)


def test_the_live_view_in_a_terminal(
    bed: Any,
    stack: tuple[Path, int, int],
    terminal: Terminal,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    _, trainer_pid, simulator_pid = stack
    stray = subprocess.Popen(["sleep", "600"])  # a process on the host
    request.addfinalizer(stray.kill)
    topology = copy.deepcopy(THREE_GPUS)
    placed = {
        TRAINER: [trainer_pid],
        SIMULATOR: [simulator_pid],
        SPARE: [simulator_pid, stray.pid],
    }
    for gpu in topology["gpus"]:
        gpu["processes"] = [{"pid": pid, "used_memory_mib": 300} for pid in placed[gpu["uuid"]]]
        gpu["utilization_gpu_percent"] = 40
        gpu["memory_used_mib"] = 1024
    bed.set_topology(topology)  # the simulator also runs on the spare GPU: a violation
    script = tmp_path / "watch.sh"
    exports = "".join(
        f"export {key}={shlex.quote(value)}\n"
        for key, value in bed.env().items()
        if key.isidentifier()
    )
    script.write_text(  # the terminal's size is the window's, never a fixed COLUMNS
        f"{exports}export TERM=xterm-256color\nunset COLUMNS LINES\nclear\necho before-the-view\n"
        f"{DRGPU_COMMAND} status --watch --interval 0.5\n"
        'echo "exit=$?"\nsleep 600\n'
    )
    terminal.start(script)

    screen = terminal.wait_for(lambda s: "violation(s)" in s and "sagemaker" in s)
    assert terminal.flag("alternate_on") == "1"
    for name in ("NVIDIA GeForce GTX 1650", "Tesla M40 24GB", "NVIDIA L4"):
        assert name in screen, screen
    assert "run live · trainer · sagemaker" in screen
    assert "run live · simulator · robomaker" in screen
    assert "WRONG-GPU: given GPU 0" in screen
    assert "GPU-Util" in screen and "█" in screen  # utilisation bars
    assert str(trainer_pid) in screen
    user = pwd.getpwuid(os.getuid()).pw_name
    assert f"{user} · sleep 600" in screen and "STRAY: on the host" in screen

    # Another run's container takes the trainer's GPU while the view runs.
    bed.docker(
        "run", "-d", "--name", INTRUDER, "--network", "none",
        "--label", "drgpu.run_id=other", "--label", f"drgpu.gpus={TRAINER}",
        "--label", "drgpu.role=trainer", "--label", "com.docker.compose.service=intruder",
        bed.image, "sleep", "infinity",
    )  # fmt: skip
    screen = terminal.wait_for(lambda s: "held by runs live, other" in s)
    assert "run other · trainer · intruder" in screen

    for width in (120, 100, 80):
        terminal.resize(width)
        check = functools.partial(_laid_out_for, width=width, stray=stray.pid, user=user)
        terminal.wait_for(check, timeout_s=30)

    terminal.tmux("send-keys", "-t", terminal.name, "C-c")
    screen = terminal.wait_for(lambda s: "exit=" in s, timeout_s=30)
    assert "exit=6" in screen  # the last refresh had violations
    assert "before-the-view" in screen  # the screen from before is back
    assert "GPU-Util" not in screen and "Traceback" not in screen
    assert "drgpu: error: " in screen  # the first violation, on stderr
    assert terminal.flag("alternate_on") == "0"
    assert terminal.flag("cursor_flag") == "1"


def _laid_out_for(screen: str, width: int, stray: int, user: str) -> bool:
    """Whether `screen` shows a whole board drawn since the terminal became `width` wide
    (until the next refresh, tmux shows the wider one cut)."""
    try:
        _assert_every_column_that_matters(screen, width, stray, user)
    except (AssertionError, KeyError, ValueError):
        return False
    return True


def _assert_every_column_that_matters(screen: str, width: int, stray: int, user: str) -> None:
    """Each GPU's row has its name (shortened at worst), utilisation and memory in MiB;
    each process its PID and memory; what is wrong is marked on its line."""
    lines = screen.splitlines()
    assert max(map(len, lines)) <= width, screen  # no line wrapped (`capture-pane -J`)
    assert "violation(s)" in lines[-1] or "violation(s)" in screen, screen
    rows = {line.split()[0]: line for line in lines if line[:4].strip().isdigit()}
    for index, name in enumerate(("GTX 1650", "Tesla M40 24GB", "L4")):
        assert name in rows[str(index)] and "40%" in rows[str(index)], screen
        assert "1024/" in rows[str(index)] and " MiB" in rows[str(index)], screen
    assert "held by runs" in rows["1"], screen  # the trainer's GPU, taken by run other
    processes = [line for line in lines if "└ " in line and "300 MiB" in line]
    assert len(processes) == 4, screen  # trainer, simulator twice, the stray
    assert any("WRONG-GPU" in line for line in processes), screen
    (stray_line,) = (line for line in processes if f" {stray} " in line)
    assert f"{user} · sleep" in stray_line and "STRAY" in stray_line, screen
