"""`drgpu cuda-check` from the host: run the probe in each container; core.cuda_verdict
judges what it saw against the container's plan."""

from __future__ import annotations

from pathlib import Path

from drgpu.core.cuda_verdict import (
    CheckResult,
    expected_uuids,
    judge,
    judge_trainer,
    probe_arguments,
)
from drgpu.core.facts import ContainerFacts
from drgpu.core.gpu_usage import LAUNCHER_ROLE, TrainerCheck, trainer_checks
from drgpu.errors import DockerError


def check(containers: list[ContainerFacts]) -> list[CheckResult]:
    """Run the probe in each running container and judge what it saw."""
    from drgpu import probe
    from drgpu.host.engine import run_file_in_container

    source = Path(probe.__file__).read_bytes()
    results = []
    for container in containers:
        if container.state != "running":
            raise DockerError(
                f"{container.name} is {container.state}, not running: start the stack first"
            )
        ran = run_file_in_container(
            container.id, source, probe_arguments(expected_uuids(container))
        )
        results.append(judge(container, ran.exit_code, ran.output))
    return results


def sagemaker_trainers(project_containers: list[ContainerFacts]) -> list[TrainerCheck]:
    """The SageMaker trainers the rl_coach of this project started (matched among every
    drgpu run's rl_coach, so another run's trainer is never taken for this one's)."""
    from drgpu.core import labels
    from drgpu.host.engine import drgpu_containers, sagemaker_candidates

    mine = {c.id for c in project_containers if c.labels.get(labels.ROLE) == LAUNCHER_ROLE}
    if not mine:
        return []
    checks = trainer_checks(sagemaker_candidates(), drgpu_containers())
    return [check for check in checks if check.launcher is not None and check.launcher.id in mine]


def check_trainers(checks: list[TrainerCheck]) -> list[CheckResult]:
    """Run the probe in each SageMaker trainer and judge what CUDA shows there."""
    from drgpu import probe
    from drgpu.host.engine import run_file_in_container

    source = Path(probe.__file__).read_bytes()
    results = []
    for check in checks:
        ran = run_file_in_container(check.container.id, source, ["--json"])
        results.append(judge_trainer(check, ran.exit_code, ran.output))
    return results
