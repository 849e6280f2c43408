"""One engine for every part (issue 29, item 1), with two engines running: engine A (`bed`)
is the one the other rule names (the default socket, or the shell's DOCKER_HOST), engine B
(`other_bed`) the one a docker context or a DOCKER_HOST written in system.env names. drgpu's
lock, claims, proof, `status`, `gpus` and `down`, Compose and DRfC's start script all act
on B, and nothing of drgpu's appears on A (no object, not even an event of one)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from drgpu.core import labels
from tests.conftest import Bed, NewRun
from tests.e2e.drfc import copy_checkout, remove_runs
from tests.e2e.helpers import THREE_GPUS, containers, service, write_env, write_stack
from tests.support.runners import DRGPU_ARGV, run_drgpu

pytestmark = pytest.mark.docker

Drgpu = Callable[..., subprocess.CompletedProcess[str]]


def engine_objects(engine: Bed) -> set[str]:
    """Every container, volume and network on an engine."""
    lists = (("ps", "-aq", "--no-trunc"), ("volume", "ls", "-q"), ("network", "ls", "-q"))
    return {found for args in lists for found in engine.docker(*args).stdout.split()}


def events(engine: Bed, since: float) -> list[str]:
    """`TYPE ACTION NAME` of each event on an engine since `since` (Unix time)."""
    until = f"{time.time() + 1:.3f}"
    form = "{{.Type}} {{.Action}} {{.Actor.Attributes.name}}"
    done = engine.docker("events", "--since", f"{since:.3f}", "--until", until, "--format", form)
    return done.stdout.splitlines()


def where_default_socket_is(engine: Bed) -> tuple[str, ...]:
    """A command prefix: what follows runs where /var/run/docker.sock is `engine`'s socket
    (a private mount namespace with its own /run), as on a host whose engine is there."""
    script = 'mount -t tmpfs drgpu-run /run && ln -s "$0" /run/docker.sock && exec "$@"'
    socket = engine.docker_host.removeprefix("unix://")
    return ("unshare", "--mount", "--propagation", "private", "sh", "-c", script, socket)


def assert_claimed_on_b_alone(
    a: Bed, b: Bed, project: str, a_before: set[str], since: float
) -> None:
    """The stack's containers and their claims are on B; the lock came and went on B; A
    neither has nor saw anything new."""
    stack = containers(b, project)
    assert stack and {c["State"]["Status"] for c in stack} == {"running"}
    assert all({labels.RUN_ID, labels.GPUS} <= set(c["Config"]["Labels"]) for c in stack)
    assert {"container create drgpu-lock", "container destroy drgpu-lock"} <= set(events(b, since))
    assert_untouched(a, a_before, since)


def assert_untouched(engine: Bed, before: set[str], since: float) -> None:
    """No new object on the engine, and it saw nothing created and nothing of drgpu's (a
    health check of another test's container may still run there)."""
    assert engine_objects(engine) == before
    assert [e for e in events(engine, since) if " create " in e or "drgpu" in e] == []


def up_status_gpus_down(
    a: Bed,
    b: Bed,
    drgpu: Drgpu,
    up_env: dict[str, str],
    tmp_path: Path,
    project: str,
    env: dict[str, str] | None = None,
) -> None:
    """`up`, `status`, `gpus` and `down` of a Compose run meant for engine B (`status` and
    `gpus` read no settings file: they run in `env`, else `up`'s environment)."""
    for engine in (a, b):
        engine.set_topology(THREE_GPUS)
    stack = write_stack(tmp_path, {"sagemaker": service(b), "robomaker": service(b)})
    env_file = tmp_path / "system.env"
    name = f"deepracer-{project}"
    a_before, since = engine_objects(a), time.time()
    started = drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=up_env)
    assert started.returncode == 0, started.stderr
    assert_claimed_on_b_alone(a, b, name, a_before, since)
    env = env or up_env
    status = drgpu("status", "--run-id", project, "--json", env=env)
    assert status.returncode == 0, status.stderr
    assert [run["run_id"] for run in json.loads(status.stdout)["runs"]] == [project]
    gpus = drgpu("gpus", "--json", env=env)
    assert gpus.returncode == 0 and project in gpus.stdout, gpus.stderr
    stopped = drgpu("down", "--env-file", str(env_file), "-f", str(stack), env=up_env)
    assert stopped.returncode == 0, stopped.stderr
    assert containers(b, name) == []
    assert_untouched(a, a_before, since)


def test_a_docker_context_names_the_engine_of_every_part(
    bed: Bed, other_bed: Bed, tmp_path: Path, new_run: NewRun
) -> None:
    config = tmp_path / "docker-config"
    env = {k: v for k, v in other_bed.env(DOCKER_CONFIG=config).items() if k != "DOCKER_HOST"}
    for args in (
        ("create", "engine-b", "--docker", f"host={other_bed.docker_host}"),
        ("use", "engine-b"),
    ):
        subprocess.run([str(bed.docker_bin), "context", *args], env=env, check=True)
    in_a = where_default_socket_is(bed)

    def drgpu(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        argv = [*in_a, *DRGPU_ARGV, *args]
        return subprocess.run(argv, env=env, capture_output=True, text=True, check=False)

    # There, the docker CLI's default engine is A and its current context B.
    for engine, flags in ((bed, ("--context", "default")), (other_bed, ())):
        argv = [*in_a, str(bed.docker_bin), *flags, "info", "--format", "{{.ID}}"]
        seen = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        assert seen.stdout == engine.docker("info", "--format", "{{.ID}}").stdout
    project = new_run()
    write_env(tmp_path, project, trainer="1", simulator="0")
    up_status_gpus_down(bed, other_bed, drgpu, env, tmp_path, project)


def test_a_docker_host_in_system_env_counts_as_compose_sees_it(
    bed: Bed, other_bed: Bed, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    env_file = write_env(tmp_path, project, trainer="1", simulator="0")
    env_file.write_text(env_file.read_text() + f"DOCKER_HOST={other_bed.docker_host}\n")
    # A shell that sourced system.env has its DOCKER_HOST: `status` and `gpus` there.
    up_status_gpus_down(bed, other_bed, run_drgpu, bed.env(), tmp_path, project, other_bed.env())


def test_drfc_start_and_drgpu_follow_the_docker_host_of_system_env(
    bed: Bed, other_bed: Bed, tmp_path: Path
) -> None:
    for engine in (bed, other_bed):
        engine.set_topology(THREE_GPUS)
        remove_runs(engine, "0")
    checkout = copy_checkout(bed, tmp_path)
    checkout.set("system.env", DOCKER_HOST=other_bed.docker_host)
    a_before, since = engine_objects(bed), time.time()
    try:
        # Activated (which exports system.env's DOCKER_HOST), then pointed at A: for `up`
        # and `down`, system.env's engine still counts, as for DRfC's scripts.
        activated = checkout.activated()
        assert activated["DOCKER_HOST"] == other_bed.docker_host
        shell = {**activated, "DOCKER_HOST": bed.docker_host}
        started = checkout.drgpu(shell, "up")
        assert started.returncode == 0, started.stderr
        assert "start.sh: Training of model" in started.stderr
        assert_claimed_on_b_alone(bed, other_bed, "deepracer-0", a_before, since)
        status = checkout.drgpu(activated, "status", "--json")
        assert status.returncode == 0, status.stderr
        assert [run["run_id"] for run in json.loads(status.stdout)["runs"]] == ["0"]
        stopped = checkout.drgpu(shell, "down")
        assert stopped.returncode == 0, stopped.stderr
        assert containers(other_bed, "deepracer-0") == []
        assert_untouched(bed, a_before, since)
    finally:
        for engine in (bed, other_bed):
            remove_runs(engine, "0")
