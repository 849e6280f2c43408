"""The DeepRacer-for-cloud-shaped checkout (tests/drfc) on the bed, activated as its users
activate it: `source bin/activate.sh [run.env]` in bash, the environment kept."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.drfc import activated, make_checkout, set_values
from tests.support.runners import run_drgpu


@dataclass(frozen=True)
class Checkout:
    """A copy of the fixture checkout, and how to run things in its activated shell."""

    root: Path
    bed: Any
    docker_config: Path

    def set(self, file: str, **values: str) -> None:
        """Change (or add) keys of system.env or a run.env, keeping every other line."""
        set_values(self.root / file, **values)

    def activated(self, run_env: str | None = None) -> dict[str, str]:
        """The environment `source bin/activate.sh [run_env]` leaves in a shell."""
        environment = self.bed.env(DOCKER_CONFIG=self.docker_config)
        return activated(self.root, *([run_env] if run_env else []), base=environment)

    def drgpu(self, shell: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
        """The real CLI, run in an activated shell (from /, so no system.env is nearby)."""
        return run_drgpu(*args, env=shell, cwd="/")

    def bash(self, shell: dict[str, str], script: str) -> subprocess.CompletedProcess[str]:
        """A bash command in the activated shell, with DRfC's dr-* functions defined."""
        return subprocess.run(
            ["bash", "-c", f"source bin/scripts_wrapper.sh; {script}"],
            cwd=self.root,
            env={**shell, "PATH": f"{Path(sys.executable).parent}:{shell['PATH']}"},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )


def copy_checkout(bed: Any, tmp_path: Path) -> Checkout:
    """A fresh copy of the fixture checkout, and a docker CLI config whose `docker compose`
    is the bed's Compose binary (as DRfC's scripts call it)."""
    root = make_checkout(tmp_path / "deepracer-for-cloud")
    docker_config = tmp_path / "docker-config"
    (docker_config / "cli-plugins").mkdir(parents=True)
    (docker_config / "cli-plugins" / "docker-compose").symlink_to(bed.compose_bin)
    return Checkout(root=root, bed=bed, docker_config=docker_config)


def remove_runs(bed: Any, *run_ids: str) -> None:
    """Every container of these runs' training and evaluation, and every SageMaker trainer."""
    for run_id in run_ids:
        bed.cleanup_project(f"deepracer-{run_id}")
        bed.cleanup_project(f"deepracer-eval-{run_id}")
    trainers = bed.docker("ps", "-aq", "--filter", "name=algo-", check=False).stdout.split()
    if trainers:
        bed.docker("rm", "-f", "-v", *trainers, check=False)
