"""The bed's Compose reads drgpu's CDI override (`driver: cdi`, `nvidia.com/gpu=<UUID>`) as
a device request of that driver, as it hands it to the engine. The bed's engine (Debian's
docker.io 20.10) has no CDI, so this is as far as a CDI request goes here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden"
MIG = "MIG-a1000000-0000-4000-8000-0000000000a1"


def compose_binary() -> str:
    found = shutil.which("docker-compose", path=str(Path(sys.executable).parent))
    found = found or shutil.which("docker-compose")
    if found is None:
        pytest.skip("docker-compose is missing (install: scripts/setup-test)")
    return found


def test_compose_reads_the_cdi_request_of_a_mig_device(tmp_path: Path) -> None:
    stack = tmp_path / "stack.yml"
    stack.write_text("services:\n  sagemaker:\n    image: trainer\n  robomaker:\n    image: sim\n")
    done = subprocess.run(
        [
            compose_binary(),
            "-p",
            "cdi",
            "-f",
            str(stack),
            "-f",
            str(GOLDEN / "cdi-mig.yml"),
            "config",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    trainer = json.loads(done.stdout)["services"]["sagemaker"]
    [request] = trainer["deploy"]["resources"]["reservations"]["devices"]
    assert request["driver"] == "cdi"
    assert request["device_ids"] == [f"nvidia.com/gpu={MIG}"]
