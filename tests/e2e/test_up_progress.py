"""`drgpu up`'s progress per service on the bed: Compose's states (creating, created,
starting, started), then drgpu's verification, one line per change off a terminal, redrawn in place
in a real terminal (tmux), nothing with --quiet."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NewRun
from tests.e2e.helpers import THREE_GPUS, service, write_env, write_stack
from tests.e2e.test_live_view import Terminal, terminal  # noqa: F401  (a fixture)
from tests.support.runners import DRGPU_COMMAND, run_drgpu

pytestmark = pytest.mark.docker


def a_stack(bed: Any, tmp_path: Path, project: str) -> list[str]:
    bed.set_topology(THREE_GPUS)
    compose = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": service(bed)})
    env_file = write_env(tmp_path, project, trainer="1", simulator="0")
    return ["--env-file", str(env_file), "-f", str(compose)]


def test_up_reports_each_service_then_its_verification(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    done = run_drgpu("up", *a_stack(bed, tmp_path, project), env=bed.env())

    assert done.returncode == 0, done.stderr
    lines = [line.rsplit(" (", 1)[0] for line in done.stderr.splitlines()]
    for name in ("sagemaker", "robomaker"):
        mine = [line for line in lines if line.startswith(f"drgpu: {name}: ")]
        states = [line.removeprefix(f"drgpu: {name}: ") for line in mine]
        assert states[0] == "Creating" and "Started" in states, done.stderr
        assert states[-1] == "verified", done.stderr
        assert states.index("Started") < states.index("verified")
    assert f"deepracer-{project}-sagemaker-1" in done.stdout  # the table, on stdout


def test_quiet_up_prints_no_progress(bed: Any, tmp_path: Path, new_run: NewRun) -> None:
    project = new_run()
    done = run_drgpu("up", "--quiet", *a_stack(bed, tmp_path, project), env=bed.env())

    assert done.returncode == 0, done.stderr
    assert not [line for line in done.stderr.splitlines() if line.startswith("drgpu: sagemaker")]
    assert "every container" in done.stderr


def test_up_in_a_terminal_redraws_one_line_per_service(
    bed: Any,
    tmp_path: Path,
    new_run: NewRun,
    terminal: Terminal,  # noqa: F811
) -> None:
    project = new_run()
    args = " ".join(shlex.quote(a) for a in a_stack(bed, tmp_path, project))
    exports = "".join(
        f"export {key}={shlex.quote(value)}\n"
        for key, value in bed.env().items()
        if key.isidentifier()
    )
    script = tmp_path / "up.sh"
    script.write_text(
        f"{exports}export TERM=xterm-256color\n"
        f'{DRGPU_COMMAND} up {args}\necho "exit=$?"\nsleep 600\n'
    )
    terminal.start(script)

    screen = terminal.wait_for(lambda s: "exit=" in s, timeout_s=120)
    assert "exit=0" in screen, screen
    lines = [line for line in screen.splitlines() if "verified" in line]
    assert len(lines) == 2, screen  # one line per service, redrawn in place
    assert "Creating" not in screen  # earlier states were overwritten
