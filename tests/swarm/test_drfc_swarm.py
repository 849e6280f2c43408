"""An activated DeepRacer-for-cloud-shaped checkout in DRfC's default Docker style, swarm:
plain `drgpu up` and `drgpu down`, as a DRfC user runs them. drgpu deploys its own stack
file of DRfC's compose files there; DRfC's start script (which exports ROBOMAKER_COMMAND)
does not run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.drfc import copy_checkout
from tests.e2e.helpers import SIMULATOR, SPARE
from tests.swarm.test_swarm_up import containers, exposed, leftovers

pytestmark = pytest.mark.docker

PROJECT = "deepracer-0"


def test_plain_up_in_a_swarm_style_drfc_shell_pins_each_gpu_and_down_leaves_nothing(
    swarm_bed: Any, tmp_path: Path
) -> None:
    # The checkout's system.env asks for the trainer on 2 (rl_coach forwards it to its
    # SageMaker trainer) and the simulator on 0; the node advertises all three GPUs.
    checkout = copy_checkout(swarm_bed, tmp_path)
    checkout.set("system.env", DR_DOCKER_STYLE="swarm")
    shell = checkout.activated()
    assert shell["DR_TRAIN_COMPOSE_FILE"].startswith("-c ")
    # What DRfC's start script would have exported.
    shell["ROBOMAKER_COMMAND"] = "/opt/ml/code/run.sh run distributed_training.launch.py"

    started = checkout.drgpu(shell, "up")

    assert started.returncode == 0, started.stderr
    assert "without start.sh" in started.stderr
    seen = containers(swarm_bed, PROJECT)
    assert sorted(seen) == [f"{PROJECT}_rl_coach.1", f"{PROJECT}_robomaker.1"]
    robomaker = seen[f"{PROJECT}_robomaker.1"]
    assert robomaker["env"]["NVIDIA_VISIBLE_DEVICES"] == SIMULATOR
    assert exposed(swarm_bed, robomaker["id"]) == [SIMULATOR]
    rl_coach = seen[f"{PROJECT}_rl_coach.1"]
    assert exposed(swarm_bed, rl_coach["id"]) == []
    assert rl_coach["env"]["CUDA_VISIBLE_DEVICES"] == SPARE  # the trainer's GPU, by UUID
    assert rl_coach["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"

    stopped = checkout.drgpu(shell, "down")

    assert stopped.returncode == 0, stopped.stderr
    assert leftovers(swarm_bed, PROJECT) == []


def test_a_swarm_task_that_exits_at_once_fails_up_and_the_stack_is_removed(
    swarm_bed: Any, tmp_path: Path
) -> None:
    # Without DRfC's start script, nothing exports ROBOMAKER_COMMAND: the simulator's
    # command ends at once (status 1).
    checkout = copy_checkout(swarm_bed, tmp_path)
    checkout.set("system.env", DR_DOCKER_STYLE="swarm")
    shell = checkout.activated()

    started = checkout.drgpu(shell, "up")

    assert started.returncode == 5, started.stderr
    # Seen running first, it fails verification with its last log lines; seen failed
    # first, Swarm's own word for it is the error.
    assert (
        "exited with status 1" in started.stderr and "ROBOMAKER_COMMAND is empty" in started.stderr
    ) or "robomaker: task failed: task: non-zero exit (1)" in started.stderr, started.stderr
    assert leftovers(swarm_bed, PROJECT) == []
