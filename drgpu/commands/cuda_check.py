"""`drgpu cuda-check` from the host: run the probe in each container; core.cuda_verdict
judges what it saw against the container's plan."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from drgpu.commands.options import resolved, run_id_of
from drgpu.commands.proving import probe_in, probes_elsewhere
from drgpu.core import labels
from drgpu.core.cuda_verdict import (
    CheckResult,
    judge,
    judge_trainer,
    probe_arguments,
    select,
)
from drgpu.core.facts import ContainerFacts
from drgpu.core.gpu_usage import LAUNCHER_ROLE, trainer_checks
from drgpu.core.inputs import InputOptions
from drgpu.core.settings import project_name
from drgpu.core.swarm_view import given_up, replaced, task_stand_in
from drgpu.errors import CheckFailedError, ConfigError, DockerError
from drgpu.host import engine, swarm_engine
from drgpu.ui.talk import warn


@dataclass(frozen=True)
class CudaCheckResult:
    """What each checked container sees, judged, in the stack `project`."""

    project: str
    results: list[CheckResult]

    @property
    def failure(self) -> CheckFailedError | None:
        """Exit 6 when a container does not see what it was given."""
        if all(result.ok for result in self.results):
            return None
        return CheckFailedError("a container does not see what it was given (its result says)")


def check_stack(
    service: str | None,
    *,
    all_services: bool,
    run_id: str | None,
    env_file: Path | None,
    evaluation: bool,
) -> CudaCheckResult:
    """Run the probe, from the host, in `service`'s running container, or every GPU
    service's and SageMaker trainer's with `all_services`, of run `run_id` (None: DR_RUN_ID
    of `env_file`) or its evaluation; judge what it saw there. A Swarm stack's tasks on
    other nodes are probed there, by a one-shot job per node (as `up` proves them)."""
    if service is not None and all_services:
        raise ConfigError("--service and --all are alternatives: name one service, or check all")
    target = resolved(InputOptions(env_file=env_file, evaluation=evaluation, needs_files=False))
    project = project_name(run_id or run_id_of(target), evaluation=evaluation)
    found = engine.project_containers(project)
    managed = swarm_engine.managed_tasks(project)
    if managed is None and any(labels.SWARM_TASK_NAME in c.labels for c in found):
        warn(f"this node is no swarm manager: {project}'s tasks on other nodes are not checked")
    every, this_node = managed or ([], "")
    gone = replaced(found, None if managed is None else every)  # of tasks Swarm replaced
    containers = [c for c in found if c.id not in gone]
    # Those that should run on other nodes (or on none yet), and each slot Swarm gave up
    # whose container is not here to be judged.
    listed = {c.id for c in containers}
    wanted = [t for t in every if t.desired_state == "running" and t.node_id != this_node]
    wanted += [t for t in given_up(every) if t.container_id not in listed]
    tasks = {task.id: task for task in wanted}
    stand_ins = [task_stand_in(project, task) for task in tasks.values()]
    if not containers and not stand_ins:
        runs = sorted({c.labels[labels.RUN_ID] for c in engine.drgpu_containers()})
        raise DockerError(
            f"no containers of {project}: is the stack up?",
            hint=f"runs here: {', '.join(runs)} (--run-id N)" if runs else None,
        )
    chosen = select([*containers, *stand_ins], service)
    # On a worker, a task stopped here may have been replaced on another node: said, not checked
    unjudged = [c for c in chosen if labels.SWARM_TASK_NAME in c.labels and c.state != "running"]
    if managed is None and unjudged and len(unjudged) < len(chosen):
        warn(
            f"not checked, stopped here: {', '.join(c.name for c in unjudged)} (this node cannot"
            " tell whether Swarm replaced a task on another node; `drgpu status` on a manager can)"
        )
        chosen = [c for c in chosen if c not in unjudged]
    # with all_services, the run's rl_coach too: its trainer is checked through it
    coaches = [c for c in containers if c.labels.get(labels.ROLE) == LAUNCHER_ROLE]
    checked = chosen + (coaches if all_services else [])
    if stopped := next((c for c in checked if c.state != "running"), None):
        raise DockerError(
            f"{stopped.name} is {stopped.state}, not running",
            hint="`drgpu status` says why; `drgpu down` then `drgpu up` starts it again",
        )
    here = [c for c in chosen if c.id not in tasks]
    results = [judge(c, *probe_in(c, probe_arguments(labels.given_gpus(c)))) for c in here]
    remote = [tasks[c.id] for c in chosen if c.id in tasks]
    results += [judge(c, *_seen_there(c, ran)) for c, ran in probes_elsewhere(project, remote)]
    # The SageMaker trainers this project's rl_coach started, matched among every drgpu
    # run's rl_coach (so another run's trainer is never taken for this one's).
    mine = {c.id for c in coaches}
    if all_services and mine:
        checks = trainer_checks(engine.sagemaker_containers(), engine.drgpu_containers())
        trainers = [t for t in checks if t.launcher and t.launcher.id in mine]
        results += [judge_trainer(t, *probe_in(t.container, ["--json"])) for t in trainers]
    return CudaCheckResult(project, results)


def _seen_there(stand_in: ContainerFacts, ran: Callable[[], tuple[int, str]]) -> tuple[int, str]:
    """What the probe saw beside a task on another node; why not, named by the task."""
    try:
        return ran()
    except DockerError as exc:
        hint = "docs/swarm.md says how a task on another node is checked there"
        if "socket" in exc.message:
            hint = "the job mounts each node's engine socket, /var/run/docker.sock or where"
            hint += " DRGPU_NODE_SOCKET says (docs/swarm.md)"
        why = f"{stand_in.name} cannot be checked there: {exc.message}"
        raise DockerError(why, hint=hint) from None
