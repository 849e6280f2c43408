"""`drgpu cuda-check`'s verdict: what the probe saw in a container, compared with the plan
its labels carry (`drgpu.gpus`: nothing goes stale when a stack is changed by hand)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from drgpu.core import labels
from drgpu.core.facts import ContainerFacts
from drgpu.core.findings import Finding, Level, failed
from drgpu.errors import ConfigError, DockerError

if TYPE_CHECKING:
    from drgpu.core.gpu_usage import TrainerCheck  # only cuda-check's trainers: status's model


@dataclass(frozen=True)
class CheckResult:
    """What one container sees against what it was given: a failure per mismatch, notes."""

    service: str
    container: str
    expected: tuple[str, ...]
    seen_nvml: tuple[str, ...]
    seen_cuda: tuple[str, ...]
    findings: tuple[Finding, ...] = ()
    injection: str | None = None  # how its GPUs came: "cdi", "runtime" (the probe says)
    replica: str = ""  # a Compose container's number, a Swarm task's slot
    node: str = ""  # a Swarm task's node id

    @property
    def ok(self) -> bool:
        """Whether the container sees what it was given."""
        return not failed(self.findings)


def select(containers: list[ContainerFacts], service: str | None) -> list[ContainerFacts]:
    """The containers to check: one service's (a simulator's, with its workers `<name>-N`),
    or (service None) every GPU service's."""
    if service is None:
        chosen = [c for c in containers if labels.given_gpus(c)]
        if not chosen:
            raise ConfigError("no service of this stack was given a GPU by drgpu")
        return chosen
    chosen = [c for c in containers if service in (c.service, labels.worker_of(c))]
    if not chosen:
        names = ", ".join(sorted({c.service for c in containers})) or "none"
        raise ConfigError(f"no service {service!r} in this stack (services: {names})")
    return chosen


def probe_arguments(expected: tuple[str, ...]) -> list[str]:
    """The probe's command line for one container."""
    if not expected:
        return ["--json", "--expect", "0"]
    return ["--json", "--expect-uuid", *expected]


def judge(container: ContainerFacts, exit_code: int, output: str) -> CheckResult:
    """A probe run's verdict on one container."""
    report = _report(container, exit_code, output)
    expectations = report.get("expectations", {})
    problems = list(expectations.get("problems", []))
    if not problems and (exit_code != 0 or not expectations.get("met", False)):
        problems.append(f"the probe's expectations are not met (exit {exit_code})")
    injection = report.get("gpu_injection")
    notes = list(report.get("findings", []))
    # an `nvidia` request served through CDI (Docker 29.2+ does where it can): no fault
    drivers = {request.driver for request in container.device_requests}
    if injection == "cdi" and drivers and "cdi" not in drivers:
        notes.append(
            f"the engine served its {'/'.join(sorted(drivers))} device request through CDI:"
            " the GPUs NVML and CUDA show are what counts"
        )
    return CheckResult(
        service=container.service,
        container=container.name,
        expected=labels.given_gpus(container),
        seen_nvml=_seen(report, "nvml"),
        seen_cuda=_seen(report, "cuda"),
        findings=_findings(container.name, problems, notes),
        injection=injection,
        replica=_replica(container),
        node=container.labels.get(labels.SWARM_NODE_ID, ""),
    )


def _replica(container: ContainerFacts) -> str:
    """Its replica number: a Swarm task's slot (task name `<service>.<slot>.<id>`), a
    Compose container's number (`deepracer-0-robomaker-2`); "" where it has none."""
    task = container.labels.get(labels.SWARM_TASK_NAME, "")
    number = task.split(".")[-2] if task.count(".") >= 2 else container.name.rpartition("-")[2]
    return number if number.isdigit() else ""


def _findings(container: str, problems: list[str], notes: Iterable[str]) -> tuple[Finding, ...]:
    """The mismatches (failed) and the probe's notes about one container."""
    return (
        *(Finding(container, Level.FAIL, problem, kind="mismatch") for problem in problems),
        *(Finding(container, Level.NOTE, note, kind="probe-note") for note in notes),
    )


def judge_trainer(check: TrainerCheck, exit_code: int, output: str) -> CheckResult:
    """A probe run's verdict on a SageMaker trainer rl_coach started: it may see every GPU
    through NVML (SageMaker local mode asks for all), but CUDA must show exactly the GPU
    its rl_coach forwards, and its CUDA_VISIBLE_DEVICES must name exactly that."""
    report = _report(check.container, exit_code, output)
    cuda = _seen(report, "cuda")
    problems = [] if check.ok else [check.message]
    if sorted(cuda) != sorted(check.planned):
        problems.append(f"CUDA shows {list(cuda) or 'no GPU'}, planned {list(check.planned)}")
    return CheckResult(
        service="SageMaker trainer",
        container=check.container.name,
        expected=check.planned,
        seen_nvml=_seen(report, "nvml"),
        seen_cuda=cuda,
        findings=_findings(check.container.name, problems, report.get("findings", [])),
    )


def _seen(report: dict[str, Any], section: str) -> tuple[str, ...]:
    """The UUIDs the probe's `nvml` or `cuda` section shows."""
    return tuple(d.get("uuid") or "" for d in report.get(section, {}).get("devices", []))


def _report(container: ContainerFacts, exit_code: int, output: str) -> dict[str, Any]:
    if exit_code in (126, 127):  # the shell's "cannot execute" and "not found"
        raise DockerError(
            f"{container.name}: the image has no python3, so the probe cannot run there",
            hint="run `python3 probe.py` from drgpu/probe.py with another interpreter, or add one",
        )
    try:
        report: dict[str, Any] = json.loads(output)
    except json.JSONDecodeError:
        last = output.strip().splitlines()[-1] if output.strip() else f"exit {exit_code}"
        raise DockerError(f"{container.name}: the probe failed: {last}") from None
    return report
