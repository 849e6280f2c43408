"""DRfC mode end to end: in an activated DRfC-shaped shell, plain `drgpu up` and
`drgpu up --eval` act on the checkout's own files, as separate projects (drgpu's own
Compose path: the checkout here has no start and stop scripts; tests/e2e/test_drfc_up.py
runs DRfC's)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import NewRun
from tests.drfc import activated, make_checkout, set_values
from tests.e2e.helpers import (
    SIMULATOR,
    THREE_GPUS,
    TRAINER,
    container_of,
    containers,
    env_of,
    service,
)
from tests.support.runners import run_drgpu

pytestmark = pytest.mark.docker


def checkout_on_bed(bed: Any, root: Path, run_id: str) -> Path:
    """The DRfC-shaped checkout without its scripts, its services running the bed's image."""
    make_checkout(root, DR_SAGEMAKER_CUDA_DEVICES="1")
    shutil.rmtree(root / "scripts")
    set_values(root / "run.env", DR_RUN_ID=run_id)
    keys = {"PYTHONPATH": "/opt/pynvml", "MODEL_KEY": "${DR_LOCAL_S3_MODEL_METADATA_KEY}"}
    training = {"rl_coach": service(bed, environment=keys), "robomaker": service(bed)}
    evaluation = {"robomaker": service(bed)}
    docker = root / "docker"
    for name, services in (
        ("docker-compose-training.yml", training),
        ("docker-compose-eval.yml", evaluation),
        ("docker-compose-keys.yml", {}),
    ):
        (docker / name).write_text(yaml.safe_dump({"services": services}))
    return root


def test_up_in_an_activated_shell_and_eval_beside_it(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    bed.set_topology(THREE_GPUS)
    root = checkout_on_bed(bed, tmp_path / "drfc", project)
    shell = activated(root, base=bed.env())
    assert shell["DR_TRAIN_COMPOSE_FILE"].startswith("-f ")
    training, evaluation = f"deepracer-{project}", f"deepracer-eval-{project}"
    try:
        # The bed's CUDA driver enumerates fastest first (L4, GTX 1650, M40): DRfC's
        # "CUDA number" 1 would be the GTX 1650, nvidia-smi's 1 is the M40. No order
        # chosen: up refuses, naming both and DRfC's meaning first.
        refused = run_drgpu("up", env=bed.env(**{**shell, "DRGPU_INDEX_ORDER": ""}))
        assert refused.returncode == 2, refused.stderr
        assert (
            "CUDA's order differs from nvidia-smi's here: DR_SAGEMAKER_CUDA_DEVICES=1:"
            " nvidia-smi's GPU 1 is the Tesla M40 24GB (CUDA's 2), CUDA's GPU 1 the NVIDIA"
            " GeForce GTX 1650 (nvidia-smi's 0)"
        ) in refused.stderr
        assert "hint: write DRGPU_INDEX_ORDER=cuda (DRfC's 'CUDA number') or =pci" in refused.stderr
        assert containers(bed, training) == []
        set_values(root / "system.env", DRGPU_INDEX_ORDER="pci")
        started = run_drgpu("up", env=bed.env(**{**shell, "DRGPU_INDEX_ORDER": ""}))
        assert started.returncode == 0, started.stderr
        coach = container_of(bed, training, "rl_coach")
        assert env_of(coach)["CUDA_VISIBLE_DEVICES"] == TRAINER  # DR_SAGEMAKER_CUDA_DEVICES=1
        assert env_of(coach)["MODEL_KEY"] == "custom_files/model_metadata.json"
        robomaker = container_of(bed, training, "robomaker")
        assert env_of(robomaker)["CUDA_VISIBLE_DEVICES"] == SIMULATOR

        # Evaluation of the same run wants the simulator GPU the training holds.
        refused = run_drgpu("up", "--eval", env=bed.env(**shell))
        assert refused.returncode == 3, refused.stderr
        assert f"held by run {project!r}" in refused.stderr
        assert containers(bed, evaluation) == []
        assert len(containers(bed, training)) == 2

        # On another GPU it runs beside the training, which it never touches.
        system = root / "system.env"
        system.write_text(system.read_text().replace("DEVICES=0\n", "DEVICES=2\n"))
        beside = run_drgpu("up", "--eval", env=bed.env(**shell))
        assert beside.returncode == 0, beside.stderr
        assert len(containers(bed, evaluation)) == 1
        assert len(containers(bed, training)) == 2
        stopped = run_drgpu("down", "--eval", env=bed.env(**shell))
        assert stopped.returncode == 0, stopped.stderr
        assert containers(bed, evaluation) == []
        assert len(containers(bed, training)) == 2
        assert run_drgpu("down", env=bed.env(**shell)).returncode == 0
        assert containers(bed, training) == []
    finally:
        bed.cleanup_project(evaluation)


def test_doctor_in_an_activated_shell_checks_and_probes_the_stacks_own_image(
    bed: Any, tmp_path: Path
) -> None:
    bed.set_topology(THREE_GPUS)
    source, _, version = bed.image.rpartition(":")
    root = make_checkout(tmp_path / "drfc", DR_SIMAPP_SOURCE=source, DR_SIMAPP_VERSION=version)
    stack = {
        "services": {
            "rl_coach": {"image": "${DR_SIMAPP_SOURCE}:${DR_SIMAPP_VERSION}"},
            "robomaker": {"image": "${DR_SIMAPP_SOURCE}:${DR_SIMAPP_VERSION}"},
        }
    }
    (root / "docker" / "docker-compose-training.yml").write_text(yaml.safe_dump(stack))
    (root / "docker" / "docker-compose-keys.yml").write_text("services: {}\n")

    done = run_drgpu("doctor", "--probe", "--json", env=bed.env(**activated(root, base=bed.env())))

    checks = json.loads(done.stdout)["findings"]
    images = [c["subject"] for c in checks if c["kind"] == "image-cuda"]
    assert images == [bed.image]  # the image DRfC's files name, not drgpu's defaults
    (probe,) = [c for c in checks if c["kind"] == "device-requests"]
    assert probe["level"] == "ok", probe
    assert bed.image in probe["message"]
    (settings,) = [c for c in checks if c["kind"] == "settings"]
    assert settings["message"] == f"{root / 'system.env'}: run 0"
