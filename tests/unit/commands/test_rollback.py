"""drgpu/commands/rollback.py: which SageMaker trainers are the run's (the rest of the
rollback runs on the bed: tests/adversarial/test_drfc_interrupt.py)."""

from __future__ import annotations

from drgpu.commands.rollback import run_trainers
from drgpu.core.facts import ContainerFacts

SETTINGS = {"DR_LOCAL_S3_MODEL_PREFIX": "rl-deepracer-sagemaker"}


def trainer(name: str, state: str = "running", **environment: str) -> ContainerFacts:
    service = name.split("-", 1)[1].rsplit("-", 1)[0] if "algo-" in name else name
    return ContainerFacts(
        id=name, name=name, service=service, project="tmpx", state=state, environment=environment
    )


def test_the_runs_trainers_running_or_only_created_are_found() -> None:
    ours = trainer("tmpab12-algo-1-x9k2z-1", RUN_ID="0", MODEL_S3_PREFIX="rl-deepracer-sagemaker")
    created = trainer("tmpcd34-algo-1-q1w2e-1", state="created", RUN_ID="0")
    assert run_trainers([ours, created], "0", SETTINGS) == [ours, created]


def test_another_runs_model_or_a_look_alike_is_left_alone() -> None:
    other_run = trainer("tmpab12-algo-1-x9k2z-1", RUN_ID="1")
    other_model = trainer("tmpcd34-algo-1-q1w2e-1", RUN_ID="0", MODEL_S3_PREFIX="someone-else")
    look_alike = trainer("redis", RUN_ID="0")
    no_run = trainer("tmpef56-algo-2-r4t5y-1")
    found = run_trainers([other_run, other_model, look_alike, no_run], "0", SETTINGS)
    assert found == []
