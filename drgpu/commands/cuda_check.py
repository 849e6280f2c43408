"""`drgpu cuda-check` from the host: run the probe in each container; core.cuda_verdict
judges what it saw against the container's plan."""

from __future__ import annotations

from pathlib import Path

from drgpu.core.cuda_verdict import CheckResult, expected_uuids, judge, probe_arguments
from drgpu.core.facts import ContainerFacts
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
