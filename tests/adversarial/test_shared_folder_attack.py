"""The shared-folder attack on the bed (issue 23, defect 1): a second user, with no
access to Docker, makes `.drgpu` first in a sticky shared folder (mode 777) and keeps
renaming a fake override, with drgpu's header and `/` mounted, onto the path Compose
reads. Root's `drgpu up` refuses with exit 2 before Compose runs: no container starts.

Two machines with one host name on the bed (defect 6): a second "host" (its own pid and
mount namespaces, another boot id and machine id, the same host name) never takes a
live `up`'s lock for a killed one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.test_engine_faults import (
    NOTHING,
    project_leftovers,
    settings,
    slow_stack,
    start,
    wait_until_running,
)
from tests.conftest import NewRun
from tests.e2e.helpers import THREE_GPUS, service
from tests.support.runners import DRGPU_ARGV

pytestmark = pytest.mark.docker

NOBODY = 65534


@pytest.fixture
def sticky_dir() -> Iterator[Path]:
    """A shared folder like /tmp: root's, mode 1777."""
    path = Path(tempfile.mkdtemp(prefix="drgpu-shared-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def attacker(folder: Path, project: str, marker: Path) -> subprocess.Popen[bytes]:
    """uid 65534 (in no docker group): `.drgpu` first, mode 777, then a fake override
    renamed onto the override's path in a loop."""
    fake = (
        "# Written by drgpu for compose project "
        + project
        + ".\n"
        + json.dumps(
            {
                "services": {
                    "sagemaker": {
                        "volumes": ["/:/host"],
                        "command": ["touch", f"/host{marker}"],
                    }
                }
            }
        )
        + "\n"
    )
    script = (
        'mkdir -m 777 "$1/.drgpu" && chmod 777 "$1/.drgpu" || exit 9\n'
        'while :; do printf %s "$2" > "$1/.drgpu/.fake.$$" &&'
        ' mv -f "$1/.drgpu/.fake.$$" "$1/.drgpu/$3.override.yml"; done\n'
    )
    return subprocess.Popen(
        ["sh", "-c", script, "sh", str(folder), fake, project],
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        cwd="/",
    )


def test_a_user_without_docker_gets_no_root_container_through_a_shared_drgpu(
    bed: Any, sticky_dir: Path, new_run: NewRun
) -> None:
    bed.set_topology(THREE_GPUS)
    run_id = new_run("shared")
    project = f"deepracer-{run_id}"
    env = settings(sticky_dir, run_id, DR_SAGEMAKER_CUDA_DEVICES="1")
    sticky_dir.chmod(0o1777)  # settings() made it root's
    stack = sticky_dir / "stack.yml"
    stack.write_text(json.dumps({"services": {"sagemaker": service(bed)}}))
    marker = Path(tempfile.gettempdir()) / f"drgpu-pwned-{run_id}"
    attack = attacker(sticky_dir, project, marker)
    try:
        deadline = time.monotonic() + 10
        while not (sticky_dir / ".drgpu" / f"{project}.override.yml").exists():
            assert attack.poll() is None, "the attacker could not start"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        up = start(bed, "up", "--env-file", str(env), "-f", str(stack))
        _, stderr = up.communicate(timeout=120)
    finally:
        attack.kill()
        attack.wait()

    pwned = marker.exists()
    marker.unlink(missing_ok=True)
    assert not pwned, "a container of the fake override wrote to the host as root"
    assert up.returncode == 2, stderr
    drgpu_dir = sticky_dir / ".drgpu"
    assert f"drgpu: error: {drgpu_dir} belongs to nobody (uid {NOBODY})" in stderr
    assert f"hint: remove {drgpu_dir}" in stderr
    assert project_leftovers(bed, project) == NOTHING
    assert bed.docker("ps", "-aq", "--filter", "volume=/").stdout.strip() == ""


def test_a_second_host_with_the_same_name_waits_for_a_live_up(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    bed.set_topology(THREE_GPUS)
    run_id = new_run("twin")
    project = f"deepracer-{run_id}"
    env = settings(tmp_path / "a", run_id, DR_SAGEMAKER_CUDA_DEVICES="1")
    stack = slow_stack(bed, tmp_path)
    up = start(bed, "up", "--env-file", str(env), "-f", str(stack))
    wait_until_running(bed, project)  # host A holds the lock, its run not yet verified

    boot, machine = tmp_path / "boot_id", tmp_path / "machine-id"
    boot.write_text("00000000-0000-4000-8000-00000000b00b\n")
    machine.write_text("0123456789abcdef0123456789abcdef\n")
    as_host_b = (
        f"mount --bind {boot} /proc/sys/kernel/random/boot_id && mount --bind {machine}"
        ' /etc/machine-id && exec "$@"'
    )
    down = subprocess.run(
        [
            "unshare",
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "sh",
            "-c",
            as_host_b,
            "sh",
            *DRGPU_ARGV,
            "down",
            "--env-file",
            str(env),
            "-f",
            str(stack),
        ],
        env=bed.env(DRGPU_LOCK_TIMEOUT="2", PYTHONPATH=str(Path(__file__).parents[2])),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    _, up_err = up.communicate(timeout=120)

    assert os.uname().nodename in down.stderr  # the same host name, named in the note
    assert down.returncode == 5, down.stderr
    assert "was killed" not in down.stderr
    assert "gave up after 2s waiting for drgpu up" in down.stderr
    assert up.returncode == 0, up_err
    assert project_leftovers(bed, project)["containers"]
