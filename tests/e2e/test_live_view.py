"""`drgpu status --watch` in a real terminal (tmux) on the bed: the live board shows the
bed's GPUs, the stack's services on their GPUs and the violations the test provokes (one
in NVML's process list before it starts, one by another run's container while it runs),
and Ctrl-C leaves the terminal as it was (main screen, cursor shown, the exit code of the
last refresh)."""

from __future__ import annotations

import copy
import os
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
        return self.tmux("capture-pane", "-p", "-t", self.name)

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
    bed: Any, stack: tuple[Path, int, int], terminal: Terminal, tmp_path: Path
) -> None:
    _, trainer_pid, simulator_pid = stack
    topology = copy.deepcopy(THREE_GPUS)
    placed = {TRAINER: [trainer_pid], SIMULATOR: [simulator_pid], SPARE: [simulator_pid]}
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
    script.write_text(
        f"{exports}export TERM=xterm-256color\nclear\necho before-the-view\n"
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

    # Another run's container takes the trainer's GPU while the view runs.
    bed.docker(
        "run", "-d", "--name", INTRUDER, "--network", "none",
        "--label", "drgpu.run_id=other", "--label", f"drgpu.gpus={TRAINER}",
        "--label", "drgpu.role=trainer", "--label", "com.docker.compose.service=intruder",
        bed.image, "sleep", "infinity",
    )  # fmt: skip
    screen = terminal.wait_for(lambda s: "held by runs live, other" in s)
    assert "run other · trainer · intruder" in screen

    terminal.tmux("send-keys", "-t", terminal.name, "C-c")
    screen = terminal.wait_for(lambda s: "exit=" in s, timeout_s=30)
    assert "exit=6" in screen  # the last refresh had violations
    assert "before-the-view" in screen  # the screen from before is back
    assert "GPU-Util" not in screen and "Traceback" not in screen
    assert "drgpu: error: " in screen  # the first violation, on stderr
    assert terminal.flag("alternate_on") == "0"
    assert terminal.flag("cursor_flag") == "1"
