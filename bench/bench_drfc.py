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

Inputs (issue 10): at most 1.15x. Beside the ratio, what drgpu up adds beyond the
verification's 0.25 s settle: its median minus DRfC start's, minus the settle (target under
0.15 s, issue 18). It starts its own private engine with scripts/testbed
(see docs/testing.md) and stops it after.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from bed import BIN, REPO, beyond_the_settle, interleaved_medians, private_engine, run

sys.path.insert(0, str(REPO))
from tests.drfc import activated, make_checkout
from tests.e2e.helpers import THREE_GPUS


def main() -> None:
    """Start an engine, measure both alternately, print the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--workers", type=int, default=1)
    arguments = parser.parse_args()
    with private_engine() as bed:
        bed.set_topology(THREE_GPUS)
        workers = {"DR_WORKERS": str(arguments.workers)}
        if arguments.workers > 1:
            workers["DR_ROBOMAKER_CUDA_DEVICES"] = "0,1"
        root = make_checkout(bed.dir / "deepracer-for-cloud", **workers)
        compose = BIN / "docker-compose"
        plugins = bed.dir / "docker-config" / "cli-plugins"
        plugins.mkdir(parents=True)
        (plugins / "docker-compose").symlink_to(compose)
        env = bed.env(
            DOCKER_CONFIG=str(bed.dir / "docker-config"),
            DRGPU_COMPOSE=str(compose),
        )
        shell = activated(root, base=env)
        drgpu = str(BIN / "drgpu")
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

        pairs: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
            "drgpu_up": (lambda: run([drgpu, "up", "--", "-w"], shell, cwd=root), drgpu_down),
            "drfc_start": (
                lambda: run(["bash", str(scripts / "start.sh"), "-q", "-w"], shell, cwd=root),
                drfc_stop,
            ),
        }
        for step, after in pairs.values():  # warm caches
            step()
            after()
        medians = interleaved_medians(pairs, arguments.runs)
    up, start = (medians[name] for name in pairs)
    print(f"runs per command: {arguments.runs} (medians), DR_WORKERS={arguments.workers}")
    print(
        f"drgpu up {up * 1000:7.1f} ms | DRfC start.sh {start * 1000:7.1f} ms"
        f" | ratio {up / start:.2f}x (target <= 1.15x) | {beyond_the_settle(up, start)}"
    )


if __name__ == "__main__":
    main()
