"""`up`'s proof beside a task on its own node: a one-shot Swarm service, constrained to
the node, runs drgpu's probe in the stack's task containers there through the node's own
engine (here the one-node swarm's manager, asked as another node would be)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from drgpu import probe
from drgpu.host import swarm_engine
from tests.conftest import NewRun
from tests.e2e.helpers import SIMULATOR, SPARE, THREE_GPUS
from tests.support.runners import run_drgpu
from tests.swarm.test_swarm_up import leftovers, service, settings

NAMES = ("sagemaker", "robomaker")


def _stack(bed: Any, tmp_path: Path) -> Path:
    path = tmp_path / "stack.yml"
    path.write_text(yaml.safe_dump({"services": {name: service(bed) for name in NAMES}}))
    return path


pytestmark = pytest.mark.docker


def test_a_toolkit_that_ignores_the_swarm_request_fails_up_from_inside(
    swarm_bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    """The manager's records are right, but the runtime hands every GPU to every task:
    only the probe inside each task's container sees it."""
    run_id = new_run()
    env_file = settings(tmp_path, run_id, workers=1)
    stack = _stack(swarm_bed, tmp_path)
    swarm_bed.set_topology({**THREE_GPUS, "hook_ignores_requests": True})
    try:
        started = run_drgpu(
            "up", "--env-file", str(env_file), "-f", str(stack), env=swarm_bed.env()
        )
    finally:
        swarm_bed.set_topology(THREE_GPUS)

    assert started.returncode == 5, started.stderr
    assert ": seen from inside" in started.stderr
    assert "Traceback" not in started.stderr
    assert leftovers(swarm_bed, f"deepracer-{run_id}") == []


def test_a_task_that_fails_during_the_settle_fails_up_with_its_error_and_log(
    swarm_bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    run_id = new_run()
    path = tmp_path / "stack.yml"
    services = {name: service(swarm_bed) for name in ("sagemaker", "robomaker")}
    services["robomaker"]["command"] = ["sh", "-c", "echo lost the world >&2; sleep 0.1; exit 4"]
    path.write_text(yaml.safe_dump({"services": services}))
    env_file = settings(tmp_path, run_id, workers=1)

    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(path), env=swarm_bed.env())

    assert started.returncode == 5, started.stderr
    # Its own error, as the manager recorded it or as its container on this node ended.
    assert "non-zero exit (4)" in started.stderr or "exited with status 4" in started.stderr
    assert "| lost the world" in started.stderr
    assert leftovers(swarm_bed, f"deepracer-{run_id}") == []


def test_a_global_job_probes_each_task_where_it_runs_and_is_removed(
    swarm_bed: Any, tmp_path: Path, new_run: NewRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = _stack(swarm_bed, tmp_path)
    run_id = new_run()
    project = f"deepracer-{run_id}"
    env_file = settings(tmp_path, run_id, workers=1)
    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=swarm_bed.env())
    assert started.returncode == 0, started.stderr
    for key, value in swarm_bed.env().items():
        monkeypatch.setenv(key, value)
    # The node's engine socket found by node ID (a Swarm template), as on a multi-node bed.
    node_id = swarm_bed.docker("info", "--format", "{{.Swarm.NodeID}}").stdout.strip()
    (tmp_path / f"{node_id}.sock").symlink_to(swarm_bed.env()["DOCKER_HOST"][len("unix://") :])
    monkeypatch.setenv("DRGPU_NODE_SOCKET", f"{tmp_path}/{{{{.Node.ID}}}}.sock")
    tasks = {t.service: t for t in swarm_engine.stack_tasks(project) if t.state == "running"}
    robomaker, sagemaker = tasks[f"{project}_robomaker"], tasks[f"{project}_sagemaker"]
    wanted = {
        robomaker.node_id: {
            robomaker.id: ["--json", "--expect-uuid", SIMULATOR],
            sagemaker.id: ["--json", "--expect-uuid", SIMULATOR],  # it has the L4
        }
    }
    source = Path(probe.__file__).read_text()

    images = {robomaker.node_id: robomaker.image}
    seen, failures = swarm_engine.proofs_on_nodes(project, source, wanted, images)

    assert failures == {}
    assert seen[robomaker.id][0] == 0, seen[robomaker.id][1]
    report = json.loads(seen[robomaker.id][1])
    assert [d["uuid"] for d in report["nvml"]["devices"]] == [SIMULATOR]
    code, output = seen[sagemaker.id]
    assert code != 0
    assert [d["uuid"] for d in json.loads(output)["nvml"]["devices"]] == [SPARE]
    assert swarm_bed.docker("service", "ls", "-q", "--filter", "label=drgpu.proof").stdout == ""
    stopped = run_drgpu("down", "--env-file", str(env_file), "-f", str(stack), env=swarm_bed.env())
    assert stopped.returncode == 0, stopped.stderr
