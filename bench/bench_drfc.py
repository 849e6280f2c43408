"""`drgpu up` in an activated DeepRacer-for-cloud checkout against the same DRfC start
without drgpu, as a ratio measured in one run.

    .venv/bin/python bench/bench_drfc.py [--runs N] [--workers N] [--swarm]

- drgpu up: `drgpu up -- -w` in the activated shell of the DRfC-shaped fixture checkout
  (tests/drfc/checkout): plan under the host lock, write the override, run the
  checkout's scripts/training/start.sh -q -w with it, verify every container, remove
  the placeholder replicas.
- DRfC start: the same `scripts/training/start.sh -q -w` in the same shell, without drgpu.
As on a DRfC host, the engine's default runtime is the (stub) NVIDIA runtime (DRfC's
prepare.sh sets it) and the stack's image carries NVIDIA_VISIBLE_DEVICES=all (DRfC's images
are CUDA images): without drgpu every container gets every GPU. Each is followed by an
untimed stop (`drgpu down`, or the checkout's stop.sh) and the removal of the SageMaker
trainers rl_coach started. Interleaved, medians.

With --swarm (DRfC's default style, issue 19) the engine is a one-node swarm, its node
labelled Robomaker and Sagemaker, and the
checkout in swarm style: `drgpu up` runs the same start.sh (its jq label check, `docker
stack deploy -c ... --detach=true`) with drgpu's swarm override, waits for every task and
verifies it; DRfC's start returns once the stack is deployed, so a third line times it
until every task runs too (what a user waits for before the training begins). Each stop
waits until the stack's tasks and network are gone.

Inputs (issue 10): at most 1.15x. Beside the ratio, what drgpu up adds beyond the
verification's 0.25 s settle: its median minus DRfC start's, minus the settle (target under
0.15 s, issue 18). It starts its own private engine with scripts/testbed
(see docs/testing.md) and stops it after.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bed import (
    BIN,
    IMAGE,
    REPO,
    Bed,
    beyond_the_settle,
    interleaved_medians,
    private_engine,
    run,
)

sys.path.insert(0, str(REPO))
from tests.drfc import activated, make_checkout
from tests.e2e.helpers import THREE_GPUS

# DRfC's prepare.sh makes the NVIDIA runtime dockerd's default (see `cuda_like` too)
DRFC_BED = {"TESTBED_NVIDIA_RUNTIME": "1"}
SWARM_BED = {**DRFC_BED, "TESTBED_NETNS": "1"}
CUDA_LIKE = "drgpu-bench/simapp:cuda-like"
PROJECT = "deepracer-0"
STACK = f"label=com.docker.stack.namespace={PROJECT}"


def main() -> None:
    """Start an engine, measure both alternately, print the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--swarm", action="store_true", help="DRfC's swarm style")
    arguments = parser.parse_args()
    with private_engine(**(SWARM_BED if arguments.swarm else DRFC_BED)) as bed:
        root, shell = activated_checkout(bed, arguments.workers, swarm=arguments.swarm)
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
            if arguments.swarm:
                stack_gone(shell)
            trainers_gone()

        def drfc_start() -> None:
            run(["bash", str(scripts / "start.sh"), "-q", "-w"], shell, cwd=root)

        def drfc_start_running() -> None:
            drfc_start()
            tasks_running(shell, arguments.workers + 1)

        pairs: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
            "drgpu_up": (lambda: run([drgpu, "up", "--", "-w"], shell, cwd=root), drgpu_down),
            "drfc_start": (drfc_start, drfc_stop),
        }
        if arguments.swarm:
            pairs["drfc_start_running"] = (drfc_start_running, drfc_stop)
        for step, after in pairs.values():  # warm caches
            step()
            after()
        medians = interleaved_medians(pairs, arguments.runs)
    report(medians, arguments.runs, arguments.workers, swarm=arguments.swarm)


def activated_checkout(bed: Bed, workers: int, *, swarm: bool) -> tuple[Path, dict[str, str]]:
    """The fixture checkout on the engine (swarm style with `swarm`), and its shell."""
    bed.set_topology(THREE_GPUS)
    # DRfC's values are CUDA numbers (its docs); drgpu refuses bare indices whose order is
    # not chosen where the two orders differ, as on this box
    values = {"DR_WORKERS": str(workers), "DRGPU_INDEX_ORDER": "cuda"}
    if workers > 1:
        values["DR_ROBOMAKER_CUDA_DEVICES"] = "0,1"
    compose = BIN / "docker-compose"
    plugins = bed.dir / "docker-config" / "cli-plugins"
    plugins.mkdir(parents=True)
    (plugins / "docker-compose").symlink_to(compose)
    env = bed.env(DOCKER_CONFIG=str(bed.dir / "docker-config"), DRGPU_COMPOSE=str(compose))
    values["DR_SIMAPP_SOURCE"], values["DR_SIMAPP_VERSION"] = cuda_like(env)
    root = make_checkout(bed.dir / "deepracer-for-cloud", **values)
    if swarm:
        swarm_init(env)
        system = root / "system.env"
        system.write_text(system.read_text().replace("DR_DOCKER_STYLE=compose\n", ""))
    return root, activated(root, base=env)


def cuda_like(env: dict[str, str]) -> tuple[str, str]:
    """The bed's image as DRfC's GPU images (CUDA images) are: NVIDIA_VISIBLE_DEVICES=all in
    its environment, so that without drgpu every container gets every GPU through the
    default runtime's hook, as on a DRfC host (its source and version)."""
    made = run(["docker", "create", IMAGE, "true"], env).strip()
    run(["docker", "commit", "-c", "ENV NVIDIA_VISIBLE_DEVICES=all", made, CUDA_LIKE], env)
    run(["docker", "rm", made], env)
    source, version = CUDA_LIKE.split(":")
    return source, version


def report(medians: dict[str, float], runs: int, workers: int, *, swarm: bool) -> None:
    """The medians, and drgpu up's ratio to each baseline."""
    up, start = medians["drgpu_up"], medians["drfc_start"]
    style = "swarm" if swarm else "compose"
    print(f"runs per command: {runs} (medians), DR_WORKERS={workers}, {style}")
    print(
        f"drgpu up {up * 1000:7.1f} ms | DRfC start.sh {start * 1000:7.1f} ms"
        f" | ratio {up / start:.2f}x (target <= 1.15x) | {beyond_the_settle(up, start)}"
    )
    if swarm:
        running = medians["drfc_start_running"]
        print(
            f"drgpu up {up * 1000:7.1f} ms | DRfC start.sh until every task runs"
            f" {running * 1000:7.1f} ms | ratio {up / running:.2f}x"
            f" | {beyond_the_settle(up, running)}"
        )


def swarm_init(env: dict[str, str]) -> None:
    """Make the engine a one-node swarm on 127.0.0.1, its node labelled as DRfC's needs."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    addresses = ["--advertise-addr", "127.0.0.1", "--data-path-addr", "127.0.0.1"]
    run(["docker", "swarm", "init", *addresses, "--listen-addr", f"127.0.0.1:{port}"], env)
    node = run(["docker", "info", "--format", "{{.Swarm.NodeID}}"], env).strip()
    labels = ["--label-add", "Sagemaker=true", "--label-add", "Robomaker=true"]
    run(["docker", "node", "update", *labels, node], env)


def tasks_running(env: dict[str, str], count: int) -> None:
    """Wait until `count` containers of the stack run."""
    while len(run(["docker", "ps", "-q", "--filter", STACK], env).split()) < count:
        time.sleep(0.05)


def stack_gone(env: dict[str, str]) -> None:
    """Wait until the stack's services, tasks, containers and network are gone (as `drgpu
    down` does: DRfC's start refuses while `docker stack ps` lists a task)."""
    while (
        run(["docker", "service", "ls", "-q", "--filter", STACK], env).split()
        or stack_tasks(env)
        or run(["docker", "ps", "-aq", "--filter", STACK], env).split()
        or run(["docker", "network", "ls", "-q", "--filter", STACK], env).split()
    ):
        time.sleep(0.1)


def stack_tasks(env: dict[str, str]) -> list[str]:
    """The stack's tasks, as DRfC's start script counts them (`docker stack ps`)."""
    listed = subprocess.run(
        ["docker", "stack", "ps", "-q", PROJECT],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return listed.stdout.split()  # "nothing found in stack" (exit 1): none


if __name__ == "__main__":
    main()
