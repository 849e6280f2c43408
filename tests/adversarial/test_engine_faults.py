"""Faults on the bed: concurrent `up`s of two users, signals during `up`, kill -9, and
`up & down`. After each: no GPU claimed twice, nothing of a failed run left behind."""

from __future__ import annotations

import grp
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NewRun
from tests.e2e.helpers import THREE_GPUS, container_of, containers, service, write_stack
from tests.support.runners import read_until, start_drgpu

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
DOCUMENTED = {0, 2, 3, 4, 5, 6, 129, 130, 143}


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder every user can read (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="drgpu-adv-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def settings(directory: Path, run_id: str, owner: int = 0, **keys: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "system.env"
    path.write_text(
        f"DR_RUN_ID={run_id}\n" + "".join(f"{key}={value}\n" for key, value in keys.items())
    )
    os.chown(directory, owner, owner)
    os.chown(path, owner, owner)
    return path


def project_leftovers(bed: Any, project: str) -> dict[str, list[str]]:
    """The containers, networks and volumes of a compose project still on the engine."""
    label = f"label=com.docker.compose.project={project}"
    return {
        "containers": bed.docker("ps", "-aq", "--filter", label).stdout.split(),
        "networks": bed.docker("network", "ls", "-q", "--filter", label).stdout.split(),
        "volumes": bed.docker("volume", "ls", "-q", "--filter", label).stdout.split(),
    }


NOTHING: dict[str, list[str]] = {"containers": [], "networks": [], "volumes": []}


def claimed_uuids(bed: Any) -> list[str]:
    """Every GPU UUID a live drgpu container's label claims (a GPU twice: listed twice)."""
    ids = bed.docker("ps", "-q", "--filter", "label=drgpu.run_id").stdout.split()
    if not ids:
        return []
    found = json.loads(bed.docker("inspect", *ids).stdout)
    return [
        uuid
        for container in found
        for uuid in container["Config"]["Labels"].get("drgpu.gpus", "").split(",")
        if uuid
    ]


def start(bed: Any, *args: str, user: int = 0, **env: str) -> subprocess.Popen[str]:
    """`drgpu ARGS` in the background, as `user`, against the bed."""
    environment = bed.env(PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(REPO), **env)
    extra: dict[str, Any] = {}
    if user:
        extra = {"user": user, "group": user, "extra_groups": _socket_groups(bed)}
        environment["HOME"] = tempfile.mkdtemp(prefix="drgpu-home-")
        os.chown(environment["HOME"], user, user)
    return start_drgpu(*args, env=environment, cwd="/", **extra)


def _socket_groups(bed: Any) -> list[int]:
    """The group of the bed's socket (docker), as a docker-group user has it."""
    socket_path = Path(bed.docker_host.removeprefix("unix://"))
    return [socket_path.stat().st_gid]


@pytest.fixture
def nobody_can_reach(bed: Any, shared_dir: Path) -> Iterator[dict[str, str]]:
    """Let uid 65534, in the socket's group, reach the bed and run Python: the folders on
    the way to the socket and the interpreter searchable (search only, restored after),
    the fake NVML library and topology readable. Yields the environment it needs."""
    socket_path = Path(bed.docker_host.removeprefix("unix://"))
    interpreter = Path(sys.executable).resolve()
    changed = []
    for folder in [*socket_path.parents, bed.dir, *interpreter.parents]:
        mode = folder.stat().st_mode & 0o777
        if not mode & 0o001:
            changed.append((folder, mode))
            folder.chmod(mode | 0o001)
    library = shared_dir / "nvml"
    shutil.copytree(bed.nvml_lib_dir, library)
    topology = shared_dir / "topology.json"
    topology.write_text(bed.topology_path.read_text())
    try:
        yield {"LD_LIBRARY_PATH": str(library), "FAKE_NVML_TOPOLOGY": str(topology)}
    finally:
        for folder, mode in changed:
            folder.chmod(mode)


def test_eight_concurrent_ups_of_two_users_never_claim_a_gpu_twice(
    bed: Any, shared_dir: Path, new_run: NewRun, nobody_can_reach: dict[str, str]
) -> None:
    bed.set_topology(THREE_GPUS)
    (shared_dir / "topology.json").write_text(json.dumps(THREE_GPUS))
    assert grp.getgrgid(_socket_groups(bed)[0])
    stack = write_stack(shared_dir, {"sagemaker": service(bed)})
    stack.chmod(0o644)
    runs = [(new_run(f"u{index}"), NOBODY if index % 2 else 0) for index in range(8)]
    processes = [
        start(
            bed,
            "up",
            "--env-file",
            str(settings(shared_dir / run_id, run_id, owner, DR_SAGEMAKER_CUDA_DEVICES="auto")),
            "-f",
            str(stack),
            user=owner,
            **nobody_can_reach,
        )
        for run_id, owner in runs
    ]
    results = [process.communicate(timeout=300) for process in processes]

    codes = [process.returncode for process in processes]
    assert sorted(codes) == [0, 0, 0, 3, 3, 3, 3, 3], results
    claimed = claimed_uuids(bed)
    assert sorted(claimed) == sorted(gpu["uuid"] for gpu in THREE_GPUS["gpus"]), claimed
    for (run_id, _), code, (_, stderr) in zip(runs, codes, results, strict=True):
        assert "Traceback" not in stderr
        if code == 3:
            assert project_leftovers(bed, f"deepracer-{run_id}") == NOTHING, stderr
    assert {owner for (_, owner), code in zip(runs, codes, strict=True) if code == 0} <= {
        0,
        NOBODY,
    }
    assert bed.docker("ps", "-aq", "--filter", "name=^drgpu-lock$").stdout.strip() == ""


def slow_stack(bed: Any, directory: Path, *, healthy: bool = True) -> Path:
    """A trainer that takes a few seconds to become healthy (or, not `healthy`, stays
    starting for ten minutes: `up` stays in flight until it is stopped, however slow the
    machine), a simulator waiting for it, and a named volume."""
    ready = "sleep 3; touch /tmp/ready; " if healthy else ""
    slow = service(
        bed,
        command=["sh", "-c", f"{ready}exec sleep infinity"],
        healthcheck={
            "test": ["CMD", "test", "-f", "/tmp/ready"],
            "interval": "1s",
            **({} if healthy else {"start_period": "600s"}),
        },
        volumes=[f"{bed.pynvml_py}:/opt/pynvml/pynvml.py:ro", "data:/data"],
    )
    path = directory / "stack.yml"
    path.write_text(
        json.dumps(
            {
                "services": {
                    "sagemaker": slow,
                    "robomaker": service(
                        bed, depends_on={"sagemaker": {"condition": "service_healthy"}}
                    ),
                },
                "volumes": {"data": {}},
            }
        )
    )
    return path


def wait_until_running(bed: Any, project: str) -> None:
    deadline = time.monotonic() + 60
    while not any(c["State"]["Running"] for c in containers(bed, project)):
        assert time.monotonic() < deadline, "the trainer never started"
        time.sleep(0.1)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_up_and_another_during_rollback_leave_nothing(
    bed: Any, tmp_path: Path, new_run: NewRun, signum: signal.Signals
) -> None:
    bed.set_topology(THREE_GPUS)
    run_id = new_run("sig")
    project = f"deepracer-{run_id}"
    env = settings(tmp_path, run_id, DR_SAGEMAKER_CUDA_DEVICES="1", DR_ROBOMAKER_CUDA_DEVICES="0")
    before = env.read_bytes()
    stack = slow_stack(bed, tmp_path, healthy=False)  # a slow test sends it in time
    running = start(bed, "up", "--env-file", str(env), "-f", str(stack))
    wait_until_running(bed, project)

    running.send_signal(signum)
    began = read_until(running.stderr, "back down")  # drgpu says so as its rollback begins
    running.send_signal(signum)  # during the rollback: it must not cut it short
    _, stderr = running.communicate(timeout=120)
    stderr = began + stderr

    assert running.returncode == 128 + signum, stderr
    assert stderr.splitlines()[-1] == f"drgpu: error: interrupted ({signum.name})"
    assert "Traceback" not in stderr
    assert project_leftovers(bed, project) == NOTHING
    assert env.read_bytes() == before


def test_rollback_keeps_the_volumes_the_run_had_before(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    bed.set_topology(THREE_GPUS)
    run_id = new_run("vol")
    project = f"deepracer-{run_id}"
    env = settings(tmp_path, run_id, DR_SAGEMAKER_CUDA_DEVICES="1", DR_ROBOMAKER_CUDA_DEVICES="0")
    stack = slow_stack(bed, tmp_path)
    first = start(bed, "up", "--env-file", str(env), "-f", str(stack))
    assert first.wait(timeout=120) == 0, first.communicate()[1]
    bed.docker("run", "--rm", "-v", f"{project}_data:/data", bed.image, "touch", "/data/mine")

    again = start(bed, "up", "--env-file", str(env), "-f", str(stack), DRGPU_COMPOSE="/bin/false")
    _, stderr = again.communicate(timeout=120)

    assert again.returncode == 5, stderr
    assert project_leftovers(bed, project) == {
        "containers": [],
        "networks": [],
        "volumes": [f"{project}_data"],
    }
    listed = bed.docker("run", "--rm", "-v", f"{project}_data:/data", bed.image, "ls", "/data")
    assert listed.stdout.split() == ["mine"]


def test_kill_9_during_up_is_cleaned_by_the_next_command(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    bed.set_topology(THREE_GPUS)
    run_id = new_run("k9")
    project = f"deepracer-{run_id}"
    env = settings(tmp_path / "a", run_id, DR_SAGEMAKER_CUDA_DEVICES="1")
    stack = slow_stack(bed, tmp_path, healthy=False)
    running = start(bed, "up", "--env-file", str(env), "-f", str(stack))
    wait_until_running(bed, project)
    running.kill()
    running.wait(timeout=30)
    assert project_leftovers(bed, project)["containers"], "kill -9 left nothing to clean"
    # The SageMaker trainers its rl_coach would have started, and another run's.
    for name, run in (("tmpk9-algo-1-abcde-1", run_id), ("tmpkeep-algo-1-fghij-1", "keep")):
        bed.docker("run", "-d", "--name", name, "-e", f"RUN_ID={run}", bed.image, "sleep", "inf")

    other = new_run("other")
    stack = write_stack(tmp_path, {"sagemaker": service(bed)})
    taker = start(
        bed,
        "up",
        "--env-file",
        str(settings(tmp_path / "b", other, DR_SAGEMAKER_CUDA_DEVICES="1")),
        "-f",
        str(stack),
    )
    _, stderr = taker.communicate(timeout=120)

    assert taker.returncode == 0, stderr
    assert f"drgpu up {project} (pid {running.pid}" in stderr
    assert "was killed" in stderr and "1 SageMaker trainers" in stderr
    assert project_leftovers(bed, project) == NOTHING
    names = bed.docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    assert "tmpk9-algo-1-abcde-1" not in names and "tmpkeep-algo-1-fghij-1" in names
    bed.docker("rm", "-f", "tmpkeep-algo-1-fghij-1")


def test_down_of_the_run_the_shell_names_removes_its_sagemaker_trainers_too(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    # `DR_RUN_ID=<id> drgpu down` where no settings are (as down's hint says): the stack, and
    # the trainers its rl_coach would have started outside it; never another run's.
    bed.set_topology(THREE_GPUS)
    run_id = new_run("tr")
    stack = write_stack(tmp_path, {"sagemaker": service(bed)})
    env = settings(tmp_path / "a", run_id, DR_SAGEMAKER_CUDA_DEVICES="1")
    up = start(bed, "up", "--env-file", str(env), "-f", str(stack))
    assert up.wait(timeout=120) == 0
    for name, run in ((f"tmp{run_id}-algo-1-abcde-1", run_id), ("tmpkeep-algo-1-fghij-1", "x")):
        bed.docker("run", "-d", "--name", name, "-e", f"RUN_ID={run}", bed.image, "sleep", "inf")

    down = start(bed, "down", "-f", str(stack), DR_RUN_ID=run_id)
    _, stderr = down.communicate(timeout=120)

    assert down.returncode == 0, stderr
    assert "removed 1 SageMaker trainer(s) of run" in stderr
    assert project_leftovers(bed, f"deepracer-{run_id}") == NOTHING
    names = bed.docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    assert f"tmp{run_id}-algo-1-abcde-1" not in names and "tmpkeep-algo-1-fghij-1" in names
    bed.docker("rm", "-f", "tmpkeep-algo-1-fghij-1")


def test_down_started_with_up_ends_with_nothing_running(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    bed.set_topology(THREE_GPUS)
    stack = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": service(bed)})
    for attempt in range(3):
        run_id = new_run(f"ud{attempt}")
        env = settings(
            tmp_path / run_id, run_id, DR_SAGEMAKER_CUDA_DEVICES="1", DR_ROBOMAKER_CUDA_DEVICES="0"
        )
        up = start(bed, "up", "--env-file", str(env), "-f", str(stack))
        down = start(bed, "down", "--env-file", str(env), "-f", str(stack))
        (_, up_err), (_, down_err) = up.communicate(timeout=120), down.communicate(timeout=120)

        assert down.returncode == 0, down_err
        assert up.returncode in (0, 5), up_err
        assert "Traceback" not in up_err + down_err
        assert project_leftovers(bed, f"deepracer-{run_id}")["containers"] == []


def test_a_lock_nobody_holds_is_waited_for_then_named(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    bed.docker("create", "--name", "drgpu-lock", "--label", "planted=1", bed.image, "true")
    try:
        run_id = new_run("planted")
        env = settings(tmp_path, run_id, DR_SAGEMAKER_CUDA_DEVICES="none")
        waiting = start(bed, "down", "--env-file", str(env), DRGPU_LOCK_TIMEOUT="1")
        _, stderr = waiting.communicate(timeout=60)
    finally:
        bed.docker("rm", "-f", "drgpu-lock")
    assert waiting.returncode == 5, stderr
    assert "waiting for an unknown holder (container" in stderr
    assert "drgpu: error: gave up after 1s waiting for an unknown holder" in stderr
    assert "docker rm drgpu-lock" in stderr


def test_no_output_of_a_running_stack_shows_a_secret(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    bed.set_topology(THREE_GPUS)
    secret = "s3cr3t-on-the-bed-0123"
    run_id = new_run("sec")
    env = settings(
        tmp_path,
        run_id,
        DR_SAGEMAKER_CUDA_DEVICES="1",
        DR_ROBOMAKER_CUDA_DEVICES="0",
        AWS_SECRET_ACCESS_KEY=secret,
    )
    given = {"AWS_SECRET_ACCESS_KEY": "${AWS_SECRET_ACCESS_KEY}", "PYTHONPATH": "/opt/pynvml"}
    stack = write_stack(
        tmp_path,
        {
            "sagemaker": service(bed, environment=given),
            "robomaker": service(bed, environment=given),
        },
    )
    outputs = []

    def drgpu(*args: str) -> None:
        process = start(bed, *args)
        out, err = process.communicate(timeout=120)
        outputs.append((args[0], process.returncode, out + err))

    for command in ("plan", "render", "up"):
        drgpu(command, "--env-file", str(env), "-f", str(stack))
    drgpu("plan", "--json", "--env-file", str(env), "-f", str(stack))
    trainer = container_of(bed, f"deepracer-{run_id}", "sagemaker")
    assert f"AWS_SECRET_ACCESS_KEY={secret}" in trainer["Config"]["Env"]  # Compose got it
    for args in (
        ("status",),
        ("status", "--json"),
        ("gpus", "--json"),
        ("cuda-check", "--all", "--json", "--env-file", str(env)),
        ("doctor", "--env-file", str(env)),
        ("down", "--env-file", str(env), "-f", str(stack)),
    ):
        drgpu(*args)
    assert [code for name, code, _ in outputs if name in ("up", "down")] == [0, 0], outputs
    assert [name for name, _, text in outputs if secret in text] == []
