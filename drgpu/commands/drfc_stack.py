"""`drgpu up` and `drgpu down` in an activated DeepRacer-for-cloud shell: DRfC's own start
and stop scripts (core.drfc_scripts says how), with drgpu's override in the compose
files they read, then proof (core.verification)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from drgpu.commands.options import resolved, settings
from drgpu.commands.preparation import Prepared, leftovers, preload_proof, prepare_with
from drgpu.commands.rollback import left_of, remove_strays, rolled_back
from drgpu.commands.run_lock import down_locked
from drgpu.core import drfc_scripts
from drgpu.core.compose_progress import plain_compose_event
from drgpu.core.inputs import DrfcCheckout, InputOptions, Inputs
from drgpu.core.model import Role
from drgpu.core.redaction import holds_secret
from drgpu.core.service_gpus import SwarmStack
from drgpu.core.swarm_node import swarm_layout
from drgpu.errors import ConfigError, DockerError
from drgpu.host import compose, engine, process, swarm, swarm_engine
from drgpu.host.compose_output import compose_warnings, talk_lines
from drgpu.host.files import override_header_template
from drgpu.host.state_files import (
    override_path,
    swarm_override_path,
    write_owned_file,
    written_by_drgpu,
)
from drgpu.targets.compose_override import render_override
from drgpu.targets.swarm_stack import render_swarm_override, swarm_services
from drgpu.ui.talk import note, spinner, warn

if TYPE_CHECKING:
    from drgpu.core.compose_progress import ProgressEvent
    from drgpu.core.facts import ContainerFacts, EngineFacts, TaskFacts
    from drgpu.core.findings import Finding
    from drgpu.core.model import Plan
    from drgpu.core.settings import Config
    from drgpu.host.process import Completed


class _StartFailed(DockerError):
    """DRfC's start script failed (exit 5), e.g. it refused to train over a model."""


def runs_scripts(target: Inputs, *, explicit_files: bool) -> bool:
    """Whether `up` and `down` run the activated checkout's own scripts (else it says so)."""
    checkout = target.checkout
    if checkout is None or explicit_files:
        return False
    if checkout.start_script.is_file() and checkout.stop_script.is_file():
        return True
    warn(
        f"{checkout.start_script} or {checkout.stop_script.name} is missing: drgpu starts and"
        " stops the compose files itself, without DRfC's setup (ROBOMAKER_COMMAND ...)"
    )
    return False


def script_target(target: Inputs, config: Config) -> Inputs:
    """The target with the compose files DRfC's start script really hands Compose."""
    files = drfc_scripts.start_files(_checkout(target), config)
    return replace(target, compose_files=files)


def up(
    prepared: Prepared,
    extra_args: Sequence[str],
    progress: Callable[[ProgressEvent], None],
) -> tuple[Plan, list[ContainerFacts], list[Finding]]:
    """Run DRfC's start script with drgpu's override and verify every container (`progress`
    hears each service's state); on any failure (or Ctrl-C) take the stack down again."""
    checkout = _checkout(prepared.target)
    plan = drfc_scripts.for_start_script(prepared.plan, checkout)
    text = render_override(plan, override_header_template())
    write_owned_file(prepared.override_path, text, private=holds_secret(plan))
    environment = compose.compose_environment(
        drfc_scripts.script_environment(prepared.config.values, checkout, prepared.override_path)
    )
    files = (*prepared.stack.files, prepared.override_path)
    script = _name(checkout.start_script, checkout)
    with rolled_back(
        plan.project,
        lambda: _take_down(checkout, environment, plan.project, files),
        strays=_trainers(prepared.config, plan),
        written=prepared.override_path,
    ):
        command = drfc_scripts.start_command(checkout, extra_args)

        def heard(line: str) -> str:  # kept; Compose's progress lines go to `progress` too
            if (event := plain_compose_event(line, plan.project)) is not None:
                progress(event)
            return line

        with process.meanwhile(preload_proof):
            started = process.stream(command, env=environment, on_line=heard)
        said = _started(started, checkout)
        from drgpu.commands.proving import verified  # imported meanwhile, above

        try:
            containers, unproven = verified(plan, progress)
        except DockerError as failure:
            # DRfC's start script exits 0 with -q whatever Compose said: say what it said.
            if said and "has no container" in failure.message:
                failure.hint = f"{script} said last: {said[-1]}\n  {failure.hint}"
            raise
        placeholders = {service.name for service in plan.services if service.placeholder}
        if replicas := [c.id for c in containers if c.service in placeholders]:
            engine.remove_containers(replicas)  # `--scale`'s placeholder, once verified
    return plan, [c for c in containers if c.service not in placeholders], unproven


def _started(started: Completed, checkout: DrfcCheckout) -> tuple[str, ...]:
    """What the start script said (shown); a `_StartFailed` when it failed."""
    said = _relay(started, checkout.start_script, checkout)
    if not started.ok:
        last = said[-1] if said else f"exit status {started.returncode}"
        raise _StartFailed(
            f"{_name(checkout.start_script, checkout)} failed: {last}",
            hint="its arguments follow `--`: `drgpu up -- -w` wipes the model prefix"
            if "-w option" in last
            else None,
        )
    return said


def drfc_env(*, evaluation: bool) -> str:
    """Write the override `drgpu up` would use in the activated DRfC shell (swarm-shaped in
    swarm style); return the exports that make DRfC's `dr-start-*` and `dr-stop-*` read it."""
    target = resolved(InputOptions(evaluation=evaluation))
    if target.checkout is None:
        raise ConfigError(
            "not an activated DeepRacer-for-cloud shell (DR_DIR is not set)",
            hint="source bin/activate.sh in your DRfC checkout first",
        )
    config = settings(target)
    config.refuse_key_mistakes()
    prepared = prepare_with(config, script_target(target, config), None)
    for finding in prepared.plan.warnings:
        warn(finding.message)
    path, swarm = prepared.override_path, config.deploys_to_swarm()
    with contextlib.suppress(DockerError):  # no engine to ask: nothing to say here
        if not swarm and (why := leftovers(prepared.plan)):
            warn(f"{why}: DRfC's start would keep them; its stop, with these exports, removes them")
    if swarm:
        path = swarm_override_path(path, prepared.plan.project)
        text = render_swarm(prepared, swarm_engine.this_swarm()[0]).text
    else:
        plan = drfc_scripts.for_start_script(prepared.plan, target.checkout)
        text = render_override(plan, override_header_template())
    write_owned_file(path, text)
    return drfc_scripts.shell_exports(target.checkout, path, swarm=swarm)


def down(config: Config, target: Inputs) -> None:
    """DRfC's stop script and what it left (`_take_down`), then the run's SageMaker trainers,
    checked gone, and drgpu's override file; under the engine-wide lock (`run_lock`)."""
    swarm = config.deploys_to_swarm()
    target = target if swarm else script_target(target, config)
    override = override_path(target.env_file, config.project)
    override = swarm_override_path(override, config.project) if swarm else override
    with down_locked(config, target, say_removed=not swarm, trainers=False):
        checkout = _checkout(target)
        written = override.is_file() and written_by_drgpu(override)
        environment = compose.compose_environment(
            drfc_scripts.script_environment(config.values, checkout, override if written else None)
        )
        files = (*(target.compose_files or ()), *([override] if written else []))
        script = _name(checkout.stop_script, checkout)
        with spinner(f"stopping {config.project} with {script}"):
            stopped = _take_down(checkout, environment, config.project, None if swarm else files)
        if not stopped:
            raise DockerError(f"{script} left {config.project} up")
        if (trainers := _trainers(config)) is not None:
            remove_strays(trainers)  # what DRfC's own lookup missed too
        if left := left_of(config.project, trainers):
            raise DockerError(
                f"{script} left {', '.join(left)}", hint=f"docker rm -f {' '.join(left)}"
            )
        if written:
            override.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                override.parent.rmdir()  # only when empty


def _checkout(target: Inputs) -> DrfcCheckout:
    assert target.checkout is not None  # runs_scripts said so
    return target.checkout


def _take_down(
    checkout: DrfcCheckout,
    environment: dict[str, str],
    project: str,
    files: tuple[Path, ...] | None = None,
) -> bool:
    """DRfC's stop script, then what it left: in swarm style (no `files`) `docker stack rm`
    until nothing is left, else `compose down --remove-orphans`; whether nothing is left."""
    stopped = process.run(["bash", str(checkout.stop_script)], env=environment)
    _relay(stopped, checkout.stop_script, checkout)
    if files is None:
        swarm.remove_stack(project, environment)
        return True
    if stopped.ok and not engine.project_containers(project):
        return True
    return compose.compose_down(compose.find_compose(environment), project, files, environment).ok


def _trainers(
    config: Config, plan: Plan | None = None
) -> Callable[[], list[ContainerFacts]] | None:
    """What lists the SageMaker trainers this run's rl_coach started; None for an evaluation
    (its training keeps its trainer) and where the `plan` starts no rl_coach."""
    launches = plan is None or any(s.role is Role.TRAINER_LAUNCHER for s in plan.services)
    if config.evaluation or not launches:
        return None
    prefix = config.values.get("DR_LOCAL_S3_MODEL_PREFIX")
    return lambda: drfc_scripts.run_trainers(engine.sagemaker_containers(), config.run_id, prefix)


def _relay(done: Completed, script: Path, checkout: DrfcCheckout) -> tuple[str, ...]:
    """Show (on stderr) Compose's warnings and the script's lines, which are returned; DRfC's
    `Stop training with dr-stop-training` is followed by drgpu's own word for it."""
    for message in compose_warnings(done.stderr):
        warn(f"compose: {message}")
    said = talk_lines(done.stdout, done.stderr)
    for line in said:
        note(f"{_name(script, checkout)}: {line}")
        if "with dr-stop-" in line:
            note("with drgpu: drgpu down" + " --eval" * checkout.evaluation)
    return said


def _name(script: Path, checkout: DrfcCheckout) -> str:
    """A script's path inside the checkout, as DRfC's docs write it."""
    return str(script.relative_to(checkout.root))


# --- swarm style (DR_DOCKER_STYLE=swarm): `docker stack deploy -c ... -c <override>` ---------


def render_swarm(prepared: Prepared, facts: EngineFacts | None) -> SwarmStack:
    """The prepared plan's swarm-shaped override, laid out for this swarm."""
    config = prepared.config
    layout = swarm_layout(config.values, facts)
    names = [service.name for service in prepared.stack.services]
    services = swarm_services(prepared.plan, names, config.simulators, layout, prepared.nodes)
    return render_swarm_override(prepared.plan, services, layout)


def swarm_up(
    prepared: Prepared, extra_args: Sequence[str]
) -> tuple[SwarmStack, list[TaskFacts], list[Finding]]:
    """DRfC's swarm start script with drgpu's override appended to its `-c` list, then every
    task verified; on any failure (or a caught signal) the stack is taken down. Refused
    before anything starts when `swarm_preflight` objects."""
    checkout = _checkout(prepared.target)
    facts = swarm_engine.engine_facts()
    jq_found = shutil.which(drfc_scripts.JQ) is not None
    if problems := drfc_scripts.swarm_preflight(checkout, facts, jq_found=jq_found):
        raise DockerError(
            "; ".join(problem for problem, _fix in problems),
            hint="\n  ".join(fix for _problem, fix in problems),
        )
    stack = render_swarm(prepared, facts)
    from drgpu.core.verification import check_node  # lazy: as swarm_deploy's

    check_node(stack, facts)
    path = swarm_override_path(prepared.override_path, prepared.plan.project)
    write_owned_file(path, stack.text)
    environment = compose.compose_environment(
        drfc_scripts.script_environment(prepared.config.values, checkout, path)
    )
    project = prepared.plan.project
    script = _name(checkout.start_script, checkout)
    with rolled_back(
        project,
        lambda: _take_down(checkout, environment, project),
        keep_on=_StartFailed if swarm_engine.stack_service_count(project) else None,
        strays=_trainers(prepared.config, prepared.plan),
        written=path,
    ):
        with spinner(f"deploying {project} with {script}"), process.meanwhile(preload_proof):
            started = process.run(drfc_scripts.start_command(checkout, extra_args), env=environment)
        said = _started(started, checkout)
        # With -q DRfC's start script exits 0 whatever `docker stack deploy` said.
        if not swarm_engine.stack_service_count(project):
            last = said[-1] if said else "exit status 0"
            raise DockerError(f"{script} deployed no service of {project}: {last}")
        from drgpu.commands.proving import proven_tasks  # imported meanwhile, above

        with spinner(f"verifying {project}"):
            tasks, unproven = proven_tasks(prepared.plan, stack)
    return stack, tasks, unproven
