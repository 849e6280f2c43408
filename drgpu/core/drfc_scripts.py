"""What DeepRacer-for-cloud's own start and stop scripts do with Compose, and how drgpu
runs them with its override. Pure: paths, settings and plans in, commands out.

DRfC's `scripts/training/start.sh` reads its compose files from `DR_TRAIN_COMPOSE_FILE`
(`-f a.yml -f b.yml`), adds `docker-compose-mount.yml` when `DR_ROBOMAKER_MOUNT_LOGS`
is true and `docker-compose-robomaker-multi.yml` when `DR_WORKERS` > 1 (compose style),
and runs `docker compose $FILES -p deepracer-$DR_RUN_ID up -d --scale
robomaker=$DR_WORKERS`. Evaluation (`scripts/evaluation/start.sh`) reads
`DR_EVAL_COMPOSE_FILE`, project `deepracer-eval-$DR_RUN_ID`, one robomaker, no scale.
The stop scripts run `docker compose <the first file> -p <project> down`.

drgpu appends its override to the variable's list, so every file DRfC adds after it
still merges as DRfC means. `--scale robomaker=N` sets the replicas of `robomaker`
whatever the files say, and Compose cannot give replicas of one service different
GPUs (docker/compose#11863), so drgpu's workers are the services `robomaker-1..N`
(one planned GPU each) and `robomaker` becomes a placeholder: each replica the scale
asks for runs `true` and exits at once, with no GPU; `drgpu up` removes them once the
stack is verified. `COMPOSE_REMOVE_ORPHANS=1` makes the stop script's `down`, which
reads only the first file, also remove the workers.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from drgpu.core.compose_stack import SIMULATOR_SERVICE
from drgpu.core.drfc import DrfcCheckout
from drgpu.core.model import Plan, ServicePlan
from drgpu.core.numbers import whole_number

QUIET = "-q"
REMOVE_ORPHANS = "COMPOSE_REMOVE_ORPHANS"
MOUNT_FILE = "docker-compose-mount.yml"
MULTI_WORKER_FILE = "docker-compose-robomaker-multi.yml"


def start_files(checkout: DrfcCheckout, values: Mapping[str, str]) -> tuple[Path, ...]:
    """The compose files DRfC's start script hands Compose, in its order."""
    files = list(checkout.compose_files)
    docker = checkout.root / "docker"
    if values.get("DR_ROBOMAKER_MOUNT_LOGS", "").strip().lower() == "true":
        files.append(docker / MOUNT_FILE)
    if not checkout.evaluation and _workers(values) > 1 and not _swarm(values):
        files.append(docker / MULTI_WORKER_FILE)
    return tuple(files)


def for_start_script(plan: Plan, checkout: DrfcCheckout) -> Plan:
    """The plan as DRfC's start script must run it: for training with workers, the
    `robomaker` drgpu keeps at 0 replicas becomes the placeholder `--scale` may multiply."""
    if checkout.evaluation:
        return plan
    return replace(plan, services=tuple(_placeholder(service) for service in plan.services))


def _placeholder(service: ServicePlan) -> ServicePlan:
    if service.name != SIMULATOR_SERVICE or not service.disabled:
        return service
    return replace(
        service,
        replicas=None,
        placeholder=True,
        note=(
            "placeholder: each replica of DRfC's --scale robomaker=N runs `true` and exits"
            " (removed after verification); the numbered workers are the simulators"
        ),
    )


def compose_file_list(checkout: DrfcCheckout, override: Path | None) -> str:
    """The variable's value with drgpu's override appended: `-f a.yml -f b.yml -f o.yml`."""
    files = (*checkout.compose_files, *([override] if override is not None else []))
    return " ".join(f"{checkout.file_flag} {path}" for path in files)


def script_environment(
    environ: Mapping[str, str],
    values: Mapping[str, str],
    checkout: DrfcCheckout,
    override: Path | None,
) -> dict[str, str]:
    """The environment of a start or stop script: the activated shell's, with the settings
    read again on top (as `dr-start-training`'s `dr-update-env` does), the compose-file
    variable ending with drgpu's override, and orphans removed by Compose."""
    return {
        **environ,
        **values,
        checkout.compose_variable: compose_file_list(checkout, override),
        REMOVE_ORPHANS: "1",
    }


def start_command(checkout: DrfcCheckout, extra_args: Sequence[str]) -> list[str]:
    """DRfC's start script, quiet (no log following), with the user's own arguments."""
    return ["bash", str(checkout.start_script), QUIET, *extra_args]


def stop_command(checkout: DrfcCheckout) -> list[str]:
    """DRfC's stop script."""
    return ["bash", str(checkout.stop_script)]


def shell_exports(checkout: DrfcCheckout, override: Path) -> str:
    """Lines for `eval "$(drgpu drfc-env)"`: DRfC's own `dr-start-*` and `dr-stop-*` then
    read drgpu's override too, and the stop scripts remove drgpu's workers."""
    return (
        f"export {checkout.compose_variable}={shlex.quote(compose_file_list(checkout, override))}\n"
        f"export {REMOVE_ORPHANS}=1\n"
    )


def _workers(values: Mapping[str, str]) -> int:
    text = values.get("DR_WORKERS", "1").strip()
    workers = whole_number(text, 0, 999_999)
    return 1 if workers is None else workers


def _swarm(values: Mapping[str, str]) -> bool:
    return values.get("DR_DOCKER_STYLE", "").strip().lower() == "swarm"
