"""drgpu/core/labels.py: the labels drgpu puts on a run's containers, and the claims read
back from them."""

from __future__ import annotations

from drgpu.core.facts import ContainerFacts
from drgpu.core.labels import claims, run_labels
from drgpu.core.model import Claim, Role
from drgpu.core.modes import Sharing

M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"  # gtx_m40 index 0


GTX1650 = "GPU-3b1d9c52-7a4e-4f0b-8c6d-2e9f1a7b5c30"  # gtx_m40 index 1


def test_labels_say_gpus_role_run_and_non_exclusive_sharing() -> None:
    assert run_labels("a", Sharing.EXCLUSIVE, Role.TRAINER, M40) == (
        ("drgpu.gpus", M40),
        ("drgpu.role", "trainer"),
        ("drgpu.run_id", "a"),
    )
    assert run_labels("a", Sharing.TIMESLICE, Role.TRAINER_LAUNCHER, "", forwarded=M40) == (
        ("drgpu.forwarded_gpus", M40),
        ("drgpu.gpus", ""),
        ("drgpu.role", "trainer-launcher"),
        ("drgpu.run_id", "a"),
        ("drgpu.sharing", "timeslice"),
    )


def test_claims_come_from_live_containers_labels() -> None:
    service = "com.docker.compose.service"
    found = claims(
        [
            ("running", {"drgpu.run_id": "a", "drgpu.gpus": f"{M40},{GTX1650}", service: "x"}),
            ("running", {"drgpu.run_id": "b", "drgpu.gpus": "", "drgpu.forwarded_gpus": M40}),
            ("created", {"drgpu.run_id": "c", "drgpu.gpus": M40, "drgpu.sharing": "timeslice"}),
            ("exited", {"drgpu.run_id": "d", "drgpu.gpus": M40}),
            ("running", {"drgpu.run_id": "e", "drgpu.gpus": ""}),
            ("running", {"drgpu.gpus": M40}),
        ]
    )
    assert found == (
        Claim("a", "x", (M40, GTX1650)),
        Claim("b", "?", (M40,)),
        Claim("c", "?", (M40,), sharing="timeslice"),
    )


def test_a_swarm_task_the_engine_chose_gpus_for_claims_them() -> None:
    from drgpu.core.labels import engine_chosen, with_engine_choice

    reserving = {"drgpu.run_id": "g", "drgpu.gpus": "", "drgpu.swarm_gpus": "1"}
    pinned = {"drgpu.run_id": "p", "drgpu.gpus": M40, "drgpu.swarm_gpus": "1"}
    environment = {"DOCKER_RESOURCE_NVIDIA-GPU": GTX1650}

    assert engine_chosen(reserving) and not engine_chosen(pinned)
    task = ContainerFacts("t", "t", "x", "p", "running", reserving, environment)
    held = claims([("running", with_engine_choice(task)), ("running", pinned)])
    assert [(claim.run_id, claim.uuids) for claim in held] == [("g", (GTX1650,)), ("p", (M40,))]


def test_a_replica_is_given_its_slots_first_entry_as_written() -> None:
    """A hand-edited `drgpu.gpus_by_slot` is read as written: a slot's first entry counts,
    and an entry of that slot without `=` gives it no GPU."""
    from drgpu.core.labels import given_gpus

    def replica(by_slot: str) -> ContainerFacts:
        task_labels = {"drgpu.gpus_by_slot": by_slot, "com.docker.swarm.task.name": "s.1.x"}
        return ContainerFacts("t", "t", "x", "p", "running", task_labels, {})

    assert given_gpus(replica(f"2={GTX1650};1={M40}")) == (M40,)
    assert given_gpus(replica(f"1={M40};1={GTX1650}")) == (M40,)
    assert given_gpus(replica(f"1;1={GTX1650}")) == ()
    assert given_gpus(replica(f"2={GTX1650}")) == ()
