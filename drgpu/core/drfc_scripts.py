"""What DeepRacer-for-cloud's own start and stop scripts do with Compose (or, in swarm
style, `docker stack deploy`), and how drgpu runs them with its override appended to their
compose-file list (docs/drfc.md: the placeholder `robomaker`, COMPOSE_REMOVE_ORPHANS).
Pure: paths, settings and plans in, commands out."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from drgpu.core.compose_stack import SIMULATOR_SERVICE
from drgpu.core.facts import ContainerFacts, EngineFacts
from drgpu.core.inputs import DrfcCheckout
from drgpu.core.model import Plan
from drgpu.core.settings import Config

REMOVE_ORPHANS = "COMPOSE_REMOVE_ORPHANS"
JQ = "jq"
# SageMaker local mode names its compose services algo-<n>-<random>, and Compose its
# containers <tmpdir>-algo-<n>-<random>-1 (or with underscores, older Compose); the engine
# filters container names by SAGEMAKER_NAME_PART, is_sagemaker_local decides.
SAGEMAKER_NAME_PART = "algo-"


def start_files(checkout: DrfcCheckout, config: Config) -> tuple[Path, ...]:
    """The compose files DRfC's start script hands Compose, in its order."""
    files = list(checkout.compose_files)
    docker = checkout.root / "docker"
    if config.values.get("DR_ROBOMAKER_MOUNT_LOGS", "").strip().lower() == "true":
        files.append(docker / "docker-compose-mount.yml")
    if not checkout.evaluation and config.workers > 1 and not config.deploys_to_swarm():
        files.append(docker / "docker-compose-robomaker-multi.yml")
    return tuple(files)


def for_start_script(plan: Plan, checkout: DrfcCheckout) -> Plan:
    """The plan as DRfC's start script must run it: for training with workers, the
    `robomaker` drgpu keeps at 0 replicas becomes the placeholder `--scale` may multiply."""
    if checkout.evaluation:
        return plan
    note = (
        "placeholder: each replica of DRfC's --scale robomaker=N runs `true` and exits"
        " (removed after verification); the numbered workers are the simulators"
    )
    services = [
        replace(s, replicas=None, placeholder=True, note=note)
        if s.name == SIMULATOR_SERVICE and s.disabled
        else s
        for s in plan.services
    ]
    return replace(plan, services=tuple(services))


def compose_file_list(checkout: DrfcCheckout, override: Path | None) -> str:
    """The variable's value with drgpu's override appended: `-f a.yml -f b.yml -f o.yml`."""
    files = (*checkout.compose_files, *([override] if override is not None else []))
    return " ".join(f"{checkout.file_flag} {path}" for path in files)


def script_environment(
    values: Mapping[str, str], checkout: DrfcCheckout, override: Path | None
) -> dict[str, str]:
    """What a start or stop script's environment adds to the shell's: the settings, the
    compose-file list ending with drgpu's override, orphans removed."""
    return {
        **values,
        checkout.compose_variable: compose_file_list(checkout, override),
        REMOVE_ORPHANS: "1",
    }


def start_command(checkout: DrfcCheckout, extra_args: Sequence[str]) -> list[str]:
    """DRfC's start script, quiet (no log following), with the user's own arguments."""
    return ["bash", str(checkout.start_script), "-q", *extra_args]


def shell_exports(checkout: DrfcCheckout, override: Path, *, swarm: bool = False) -> str:
    """Lines for `eval "$(drgpu drfc-env)"`: DRfC's `dr-start-*` and `dr-stop-*` then read
    drgpu's override too, and (Compose style) the stop scripts remove drgpu's workers."""
    files = shlex.quote(compose_file_list(checkout, override))
    orphans = "" if swarm else f"export {REMOVE_ORPHANS}=1\n"
    return f"export {checkout.compose_variable}={files}\n{orphans}"


def swarm_preflight(
    checkout: DrfcCheckout, facts: EngineFacts, *, jq_found: bool
) -> list[tuple[str, str]]:
    """What stops DRfC's swarm start script, or the stack, before it deploys, each with its
    fix: no `jq`, no swarm, or (training) a node label missing."""
    problems: list[tuple[str, str]] = []
    if not jq_found:
        why = f"{JQ} is not installed: DRfC's swarm start checks the node labels with it"
        problems.append((why, f"sudo apt-get install {JQ} (or your distribution's {JQ} package)"))
    if checkout.evaluation:
        return problems
    if not facts.nodes:
        why = "this engine is no swarm manager: DRfC's stacks deploy from one"
        return [*problems, (why, "docker swarm init (or run it on a manager node)")]
    here = [node for node in facts.nodes if node.id == facts.node_id]
    for label, nodes, why in (  # Robomaker, then Sagemaker, as DRfC checks
        ("Robomaker", facts.nodes, "no swarm node is labelled {}: DRfC's start script refuses"),
        ("Sagemaker", here, "this node is not labelled {}: rl_coach, pinned here, cannot run"),
    ):
        if not any(node.labels.get(label) == "true" for node in nodes):
            fix = f"docker node update --label-add {label}=true {facts.node_id or '<node>'}"
            problems.append((why.format(f"{label}=true"), fix))
    return problems


def run_trainers(
    candidates: list[ContainerFacts], run_id: str, prefix: str | None = None
) -> list[ContainerFacts]:
    """The SageMaker local trainers among `candidates` the rl_coach of run `run_id` started,
    as DRfC's stop script judges: by `RUN_ID`, and model prefix where both are set."""
    return [
        container
        for container in candidates
        if is_sagemaker_local(container)
        and container.environment.get("RUN_ID") == run_id
        and (not prefix or container.environment.get("MODEL_S3_PREFIX") in (None, prefix))
    ]


def is_sagemaker_local(container: ContainerFacts) -> bool:
    """Whether a container is a trainer SageMaker local mode started (`algo-N-xxxxx`)."""
    return bool(
        re.match(r"algo-[0-9]+-[a-z0-9]+$", container.service)
        or re.search(r"(?:^|[-_])algo-[0-9]+-[a-z0-9]+(?:[-_][0-9]+)?$", container.name)
    )
