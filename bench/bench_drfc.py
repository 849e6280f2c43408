"""`drgpu up` in an activated DeepRacer-for-cloud checkout against the same DRfC start
without drgpu, as a ratio measured in one run.

    .venv/bin/python bench/bench_drfc.py [--runs N] [--workers N]

- drgpu up: `drgpu up -- -w` in the activated shell of the DRfC-shaped fixture checkout
  (tests/drfc/checkout): plan under the host lock, write the override, run the
  checkout's scripts/training/start.sh -q -w with it, verify every container, remove
  the placeholder replicas.
- DRfC start: the same `scripts/training/start.sh -q -w` in the same shell, without drgpu.
Each is followed by an untimed stop (`drgpu down`, or the checkout's stop.sh) and the
removal of the SageMaker trainers rl_coach started. Interleaved, medians.

Target (issue 10): at most 1.15x. It starts its own private engine with scripts/testbed
(see README) and stops it after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTBED = REPO / "scripts" / "testbed"
CHECKOUT = REPO / "tests" / "drfc" / "checkout"
sys.path.insert(0, str(REPO))
from tests.e2e.helpers import THREE_GPUS  # noqa: E402  (the bed's mixed box)


def run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> str:
    """Run a command; a failure ends the benchmark with its output."""
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"bench: {' '.join(argv[:4])} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def timed(step: Callable[[], None]) -> float:
    """The wall time of one call of `step`, in seconds."""
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def activated(root: Path, env: dict[str, str]) -> dict[str, str]:
    """The environment `source bin/activate.sh` leaves in a shell."""
    script = "source bin/activate.sh >/dev/null || exit 1; env -0"
    output = run(["bash", "-c", script], env, cwd=root)
    pairs = (item.partition("=") for item in output.split("\0") if "=" in item)
    return {key: value for key, _, value in pairs}


def main() -> None:
    """Start an engine, measure both alternately, print the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--workers", type=int, default=1)
    arguments = parser.parse_args()
    bed = Path(tempfile.mkdtemp(prefix="drgpu-bench-", dir="/tmp"))
    try:
        started = subprocess.run(
            [str(TESTBED), "start", str(bed)], capture_output=True, text=True, check=False
        )
        if started.returncode != 0:
            sys.exit(f"bench: scripts/testbed start failed:\n{started.stderr[-2000:]}")
        values = dict(
            line.split("=", 1) for line in (bed / "bed.env").read_text().splitlines() if "=" in line
        )
        values = {key: value.strip("'") for key, value in values.items()}
        Path(values["FAKE_NVML_TOPOLOGY"]).write_text(json.dumps(THREE_GPUS))
        root = bed / "deepracer-for-cloud"
        shutil.copytree(CHECKOUT, root)
        system = root / "system.env"
        system.write_text(
            system.read_text().replace("DR_WORKERS=1", f"DR_WORKERS={arguments.workers}")
            + ("DR_ROBOMAKER_CUDA_DEVICES=0,1\n" if arguments.workers > 1 else "")
        )
        compose = Path(sys.executable).parent / "docker-compose"
        plugins = bed / "docker-config" / "cli-plugins"
        plugins.mkdir(parents=True)
        (plugins / "docker-compose").symlink_to(compose)
        # As installed: byte-compiled modules are cached, not compiled on every call.
        environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        shell = activated(
            root,
            {
                **environ,
                "DOCKER_HOST": values["BED_DOCKER_HOST"],
                "DOCKER_CONFIG": str(bed / "docker-config"),
                "FAKE_NVML_TOPOLOGY": values["FAKE_NVML_TOPOLOGY"],
                "LD_LIBRARY_PATH": values["FAKE_NVML_LIB_DIR"],
                "DRGPU_COMPOSE": str(compose),
                "DRGPU_LOCK_FILE": str(bed / "drgpu.lock"),
            },
        )
        drgpu = str(Path(sys.executable).parent / "drgpu")
        scripts = root / "scripts" / "training"

        def trainers_gone() -> None:
            found = run(["docker", "ps", "-aq", "--filter", "name=algo-"], shell).split()
            if found:
                run(["docker", "rm", "-f", *found], shell)

        def drgpu_down() -> None:
            run([drgpu, "down"], shell, cwd=root)
            trainers_gone()

        def drfc_stop() -> None:
            run(["bash", str(scripts / "stop.sh")], shell, cwd=root)
            trainers_gone()

        pairs = {
            "drgpu_up": (lambda: run([drgpu, "up", "--", "-w"], shell, cwd=root), drgpu_down),
            "drfc_start": (
                lambda: run(["bash", str(scripts / "start.sh"), "-q", "-w"], shell, cwd=root),
                drfc_stop,
            ),
        }
        for step, after in pairs.values():  # warm caches
            step()
            after()
        samples: dict[str, list[float]] = {name: [] for name in pairs}
        for _ in range(arguments.runs):  # interleaved, so that drift hits both sides alike
            for name, (step, after) in pairs.items():
                samples[name].append(timed(step))
                after()
        up, start = (statistics.median(samples[name]) for name in pairs)
    finally:
        subprocess.run([str(TESTBED), "stop", str(bed)], capture_output=True, check=False)
    print(f"runs per command: {arguments.runs} (medians), DR_WORKERS={arguments.workers}")
    print(
        f"drgpu up {up * 1000:7.1f} ms | DRfC start.sh {start * 1000:7.1f} ms"
        f" | ratio {up / start:.2f}x (target <= 1.15x)"
    )


if __name__ == "__main__":
    main()
