"""One engine for every part (issue 29, item 1): drgpu's lock, claims, proof, `status`,
`gpus` and `down` use the engine Compose uses, whether a docker context or a DOCKER_HOST
written in system.env names it, while the environment's default names another (here an
engine that is not there)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NewRun
from tests.e2e.helpers import THREE_GPUS, containers, service, write_env, write_stack
from tests.support.runners import run_drgpu

pytestmark = pytest.mark.docker


def up_status_gpus_down(bed: Any, env: dict[str, str], tmp_path: Path, project: str) -> None:
    bed.set_topology(THREE_GPUS)
    stack = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": service(bed)})
    env_file = tmp_path / "system.env"
    name = f"deepracer-{project}"
    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=env)
    assert started.returncode == 0, started.stderr
    assert {c["State"]["Status"] for c in containers(bed, name)} == {"running"}
    status = run_drgpu("status", "--run-id", project, "--json", env=env)
    assert status.returncode == 0, status.stderr
    assert [run["run_id"] for run in json.loads(status.stdout)["runs"]] == [project]
    gpus = run_drgpu("gpus", "--json", env=env)
    assert gpus.returncode == 0 and project in gpus.stdout, gpus.stderr
    stopped = run_drgpu("down", "--env-file", str(env_file), "-f", str(stack), env=env)
    assert stopped.returncode == 0, stopped.stderr
    assert containers(bed, name) == []


def test_a_docker_context_names_the_engine_of_every_part(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    config = tmp_path / "docker-config"
    cli_env = {**bed.env(DOCKER_CONFIG=config)}
    for args in (("create", "bed", "--docker", f"host={bed.docker_host}"), ("use", "bed")):
        subprocess.run([str(bed.docker_bin), "context", *args], env=cli_env, check=True)
    project = new_run()
    write_env(tmp_path, project, trainer="1", simulator="0")
    env = {key: value for key, value in cli_env.items() if key != "DOCKER_HOST"}
    assert "DOCKER_HOST" not in env and os.path.isfile(config / "config.json")
    up_status_gpus_down(bed, env, tmp_path, project)


def test_a_docker_host_in_system_env_counts_as_compose_sees_it(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    env_file = write_env(tmp_path, project, trainer="1", simulator="0")
    env_file.write_text(env_file.read_text() + f"DOCKER_HOST={bed.docker_host}\n")
    env = bed.env(DOCKER_HOST=f"unix://{tmp_path}/not-this-engine.sock")
    bed.set_topology(THREE_GPUS)
    stack = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": service(bed)})
    name = f"deepracer-{project}"
    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=env)
    assert started.returncode == 0, started.stderr
    assert {c["State"]["Status"] for c in containers(bed, name)} == {"running"}
    stopped = run_drgpu("down", "--env-file", str(env_file), "-f", str(stack), env=env)
    assert stopped.returncode == 0, stopped.stderr
    assert containers(bed, name) == []
