"""`up`'s proof beside a task on its own node: a one-shot Swarm global job, constrained to
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
from tests.e2e.helpers import SIMULATOR, SPARE
from tests.support.runners import run_drgpu
from tests.swarm.test_swarm_up import service, settings

NAMES = ("sagemaker", "robomaker")

pytestmark = pytest.mark.docker


def test_a_global_job_probes_each_task_where_it_runs_and_is_removed(
    swarm_bed: Any, tmp_path: Path, new_run: NewRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = tmp_path / "stack.yml"
    stack.write_text(yaml.safe_dump({"services": {n: service(swarm_bed) for n in NAMES}}))
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

    seen, failures = swarm_engine.proofs_on_nodes(project, robomaker.image, source, wanted)

    assert failures == {}
    assert seen[robomaker.id][0] == 0, seen[robomaker.id][1]
    report = json.loads(seen[robomaker.id][1])
    assert [d["uuid"] for d in report["nvml"]["devices"]] == [SIMULATOR]
    code, output = seen[sagemaker.id]
    assert code != 0
    assert [d["uuid"] for d in json.loads(output)["nvml"]["devices"]] == [SPARE]
    assert swarm_bed.docker("service", "ls", "-q", "--filter", "label=drgpu.proof").stdout == ""
