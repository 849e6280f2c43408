"""What the commands share with the command line: the one rule for a run's project name and
label key, the one rule for Swarm, the inputs an options dataclass names, and how a
command's result says that it failed (exit 6)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from drgpu.commands.doctor import DoctorResult
from drgpu.commands.drfc_stack import _relay
from drgpu.commands.options import resolved
from drgpu.commands.status import StatusResult
from drgpu.core.findings import Finding, Level
from drgpu.core.gpu_usage import Status
from drgpu.core.inputs import DrfcCheckout, InputOptions
from drgpu.core.model import Inventory
from drgpu.core.settings import Config, config_from_values, project_name, run_key
from drgpu.errors import CheckFailedError, ExitCode
from drgpu.host.process import Completed


@pytest.mark.parametrize(
    ("evaluation", "project", "key"),
    [(False, "deepracer-7", "7"), (True, "deepracer-eval-7", "eval-7")],
)
def test_the_settings_and_a_bare_run_id_name_a_run_alike(
    evaluation: bool, project: str, key: str
) -> None:
    config = config_from_values({"DR_RUN_ID": "7"}, {}, evaluation=evaluation)
    assert project_name("7", evaluation=evaluation) == config.project == project
    assert run_key("7", evaluation=evaluation) == config.run_key == key


@pytest.mark.parametrize(
    ("style", "flag", "expected"),
    [("compose", False, False), ("compose", True, True), ("swarm", False, True)],
)
def test_swarm_is_the_flag_or_the_docker_style(
    make_config: Callable[..., Config], style: str, flag: bool, expected: bool
) -> None:
    assert make_config(DR_DOCKER_STYLE=style).deploys_to_swarm(flag) is expected


def test_input_options_resolve_outside_a_drfc_shell(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("DR_DIR", raising=False)
    stack = tmp_path / "stack.yml"
    target = resolved(
        InputOptions(env_file=tmp_path / "my.env", compose_files=(stack,), evaluation=True)
    )
    assert (target.env_file, target.compose_files, target.evaluation) == (
        tmp_path / "my.env",
        (stack,),
        True,
    )
    assert target.checkout is None


def test_a_doctor_result_fails_on_a_failed_check_not_on_a_warning() -> None:
    passing = DoctorResult(
        [Finding("nvml", Level.OK, "ok"), Finding("hook", Level.WARN, "old", "update")]
    )
    assert passing.failure is None
    failing = DoctorResult(
        [*passing.checks, Finding("docker", Level.FAIL, "down", "start it", "docker")]
    )
    failure = failing.failure
    assert isinstance(failure, CheckFailedError)
    assert failure.exit_code == ExitCode.CHECK_FAILED
    assert (failure.message, failure.hint) == ("1 check(s) failed: docker", "start it")


@pytest.mark.parametrize(
    ("count", "said"), [(2, " (and 1 more violation)"), (3, " (and 2 more violations)")]
)
def test_a_status_failure_says_how_many_more_violations(count: int, said: str) -> None:
    findings = tuple(Finding(f"PID {n}", Level.FAIL, f"PID {n} strays") for n in range(count))
    result = StatusResult(Status(Inventory(gpus=()), {}, (), (), findings, ()), watched=False)
    assert result.failure is not None and result.failure.message == f"PID 0 strays{said}"


@pytest.mark.parametrize("evaluation", [False, True])
def test_drfc_s_stop_advice_is_followed_by_drgpu_s_own(
    evaluation: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkout = DrfcCheckout(tmp_path, None, evaluation, (), "-f")
    line = "ERROR: Processes running in stack deepracer-0. Stop training with dr-stop-training."
    _relay(Completed(1, line + "\n", ""), tmp_path / "start.sh", checkout)
    said = capsys.readouterr().err.splitlines()
    assert said[-1] == "drgpu: with drgpu: drgpu down" + " --eval" * evaluation
