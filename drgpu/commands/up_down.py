"""`drgpu plan`, `render`, `up` and `down`: read the world, plan, write files, drive Compose."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from drgpu.commands.state_files import override_path, state_dir, write_owned_file
from drgpu.core.compose_stack import Stack, base_stack_file, load_stack
from drgpu.core.model import Claim, Inventory, Plan
from drgpu.core.planning import make_plan, service_requests
from drgpu.core.settings import Config, load_target_config
from drgpu.core.target import Target
from drgpu.errors import DockerError, NvmlUnavailableError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from drgpu.core.compose_progress import ProgressEvent
    from drgpu.core.facts import ContainerFacts
    from drgpu.host.process import Completed


@dataclass(frozen=True)
class Prepared:
    """Everything `up`, `plan` and `render` act on."""

    config: Config
    stack: Stack
    plan: Plan
    override_path: Path
    target: Target


def prepare(target: Target, inventory_file: Path | None) -> Prepared:
    """Read settings, stack and inventory, and plan; any problem raises its DrgpuError.

    Planned against this host (no inventory file), the plan also respects what other
    runs hold; when the Docker engine cannot be asked, a warning says so.
    """
    return prepare_with(load_settings(target), target, inventory_file)


def load_settings(target: Target) -> Config:
    """The target's settings; from now on no output shows the value of a secret one."""
    from drgpu.core.redaction import secret_values
    from drgpu.ui.talk import hide

    config = load_target_config(target)
    hide(secret_values(config.values))
    return config


def prepare_with(config: Config, target: Target, inventory_file: Path | None) -> Prepared:
    """`prepare` for settings already read from `target`."""
    return _prepare(config, target, _checked_stack(config, target), inventory_file, strict=False)


@contextmanager
def prepare_locked(config: Config, target: Target) -> Iterator[Prepared]:
    """`prepare` for `up`, under the engine-wide lock until the block ends: no other
    `drgpu up` or `down` can read or change the runs between this plan and its proof."""
    from drgpu.commands import guard
    from drgpu.host import nvml

    state_dir(target.env_file)
    with ExitStack() as held:
        # The NVML binding takes a while to import: do it while the engine creates the lock.
        with meanwhile(nvml.preload):
            stack = _checked_stack(config, target)  # bad input: no lock
            held.enter_context(guard.locked("up", config.project, config.values))
        yield _prepare(config, target, stack, None, strict=True)


def _checked_stack(config: Config, target: Target) -> Stack:
    """The target's stack, its DRGPU_DEVICES_<SERVICE> checked (a bad one fails before
    NVML is read)."""
    stack = load_stack(stack_files(target))
    service_requests(config, stack)
    return stack


def _prepare(
    config: Config, target: Target, stack: Stack, inventory_file: Path | None, *, strict: bool
) -> Prepared:
    inventory = _inventory(config, inventory_file)
    claims: tuple[Claim, ...] = ()
    blind: str | None = None
    if inventory_file is None and config.wants_gpu:
        claims, blind = _claims(strict)
    plan = make_plan(config, stack, inventory, claims)
    if blind is not None:
        plan = replace(plan, warnings=(*plan.warnings, blind))
    return Prepared(
        config=config,
        stack=stack,
        plan=plan,
        override_path=override_path(target.env_file, config.project),
        target=target,
    )


def stack_files(target: Target) -> list[Path]:
    """The compose files of the target's stack: its own, or drgpu's base stack."""
    return list(target.compose_files or [base_stack_file()])


def _claims(strict: bool) -> tuple[tuple[Claim, ...], str | None]:
    """What other runs hold, from the labels of their containers; when the engine cannot
    be asked, nothing and (unless `strict`: then the error) why."""
    from drgpu.core.labels import claims
    from drgpu.host.engine import drgpu_labels

    try:
        return claims(drgpu_labels()), None
    except DockerError as exc:
        if strict:
            raise
        return (), f"cannot see what other runs hold ({exc.message}): planned as if none ran"


def _inventory(config: Config, inventory_file: Path | None) -> Inventory:
    """The GPUs to plan against: a file, or NVML; none needed for a CPU-only stack."""
    if inventory_file is not None:
        from drgpu.core.topology import load_inventory

        inventory = load_inventory(inventory_file)
        if inventory.init_error and config.wants_gpu:
            raise NvmlUnavailableError(
                f"{inventory_file}: NVML failed on that machine ({inventory.init_error})"
            )
        return inventory
    if not config.wants_gpu:
        return Inventory(gpus=())
    from drgpu.core.index_order import bare_indices
    from drgpu.host.nvml import read_inventory

    inventory = read_inventory()
    asks_index = any(bare_indices(r) for r in (config.trainer_devices, config.simulator_devices))
    if asks_index and len(inventory.gpus) > 1:
        from drgpu.host.cuda import default_order

        inventory = replace(inventory, cuda_order=default_order(inventory))
    return inventory


def up(
    prepared: Prepared, progress: Callable[[ProgressEvent], None] | None = None
) -> list[ContainerFacts]:
    """Render, start the stack, and verify it; on any failure or caught signal the run
    goes back down (`guard.rolled_back`). With `progress`, it hears each service's state
    as Compose reports it, then its verification (else a spinner shows)."""
    from drgpu.commands import guard
    from drgpu.host import compose
    from drgpu.ui.talk import preload_rich

    write_override(prepared.override_path, prepared.plan)
    files = (*prepared.stack.files, prepared.override_path)
    binary = compose.find_compose(prepared.config.values)
    environment = compose.compose_environment(prepared.config.values)
    # --remove-orphans: workers of an earlier DR_WORKERS must not keep their GPUs.
    command = compose.compose_command(
        binary, prepared.plan.project, files, "up", "-d", "--remove-orphans"
    )
    project = prepared.plan.project
    with guard.rolled_back(project, lambda: bring_down(binary, project, files, environment)):
        started = _compose_up(command, environment, project, progress)
        show_compose_warnings(started.stderr)
        if not started.ok:
            raise DockerError(
                f"compose up failed: {started.last_error_line()}",
                hint=_compose_hint(started.stderr),
            )
        with meanwhile(preload_rich):  # the tables' import, while verification waits
            containers = verified(prepared.plan, progress)
    return containers


def write_override(path: Path, plan: Plan) -> None:
    """Write the plan's compose override to `path`, readable by its owner alone when it
    holds a secret value."""
    from drgpu.core.redaction import holds_secret
    from drgpu.targets.compose_override import render_override

    write_owned_file(path, render_override(plan), private=holds_secret(plan))


@contextmanager
def meanwhile(work: Callable[[], object]) -> Iterator[None]:
    """Run `work` in a thread while the block runs (e.g. an import while a step waits on
    the engine); the block ends when both are done."""
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()


LOG_TAIL_LINES = 5
SETTLE_S = 0.25


def verified(
    plan: Plan, progress: Callable[[ProgressEvent], None] | None = None
) -> list[ContainerFacts]:
    """The containers of the started stack, proven against the plan; a DockerError naming
    every difference (with the last log lines of each container that stopped) if not.
    `progress` hears whether each container was verified.

    A container counts once it has run for SETTLE_S: one whose command fails at once
    has stopped by then."""
    from drgpu.core.verification import verify
    from drgpu.host import engine

    containers = engine.project_containers(plan.project)
    if settle(containers):
        containers = engine.project_containers(plan.project)
    problems = verify(plan, containers)
    if progress is not None:
        from drgpu.core.compose_progress import verification_events

        for event in verification_events([(c.name, c.service) for c in containers], problems):
            progress(event)
    if not problems:
        return containers
    raise DockerError(
        f"the started stack does not match the plan: {'; '.join(problems)}",
        hint="\n  ".join(
            [
                *stopped_logs(plan, containers),
                "the stack was brought back down; `drgpu doctor` checks the host",
            ]
        ),
    )


def settle(containers: Iterable[ContainerFacts]) -> bool:
    """Wait until the last container to start has run for SETTLE_S (one whose command
    fails at once has stopped by then); whether it waited, so the facts are stale."""
    import time

    starts = [c.started_at for c in containers if c.started_at is not None and not c.stopped]
    wait = SETTLE_S - (time.time() - max(starts)) if starts else 0.0
    if wait <= 0:
        return False
    time.sleep(min(wait, SETTLE_S))
    return True


def stopped_logs(plan: Plan, containers: Iterable[ContainerFacts]) -> list[str]:
    """The last log lines of each container whose state fails verification."""
    from drgpu.core.verification import stopped_badly
    from drgpu.host import engine

    logs = []
    for container in stopped_badly(plan, list(containers)):
        tail = engine.container_log_tail(container.id, LOG_TAIL_LINES)
        shown = "".join(f"\n    | {line}" for line in tail) or "\n    | (no output)"
        logs.append(f"last lines of {container.name}:{shown}")
    return logs


def show_compose_warnings(stderr: str) -> None:
    """Compose's own warnings (unset variables, obsolete keys ...) as drgpu warnings."""
    from drgpu.core.compose_output import compose_warnings
    from drgpu.ui.talk import warn

    for message in compose_warnings(stderr):
        warn(f"compose: {message}")


def _compose_up(
    command: list[str],
    environment: dict[str, str],
    project: str,
    progress: Callable[[ProgressEvent], None] | None,
) -> Completed:
    """Run `compose up`: behind a spinner, or with `--progress json`, each line of it an
    event for `progress` (a Compose without that mode runs it plainly)."""
    from drgpu.host import process

    if progress is None:
        from drgpu.ui.talk import spinner

        with spinner(f"starting {project}"):
            return process.run(command, env=environment)
    from drgpu.core.compose_progress import compose_event, log_line

    def heard(line: str) -> str | None:
        event = compose_event(line, project)
        if event is None:
            return log_line(line)
        progress(event)
        return event.state if event.failed else None

    position = command.index("-p")  # the global flags go before the subcommand
    with_json = [*command[:position], "--progress", "json", *command[position:]]
    started = process.stream(with_json, env=environment, on_line=heard)
    if not started.ok and "progress" in started.last_error_line():
        return process.run(command, env=environment)
    return started


def down(config: Config, target: Target) -> None:
    """Stop and remove the stack's containers (under the engine-wide lock: see `guard`)."""
    from drgpu.host import compose
    from drgpu.ui.talk import spinner

    files: tuple[Path, ...] = tuple(stack_files(target))
    override = override_path(target.env_file, config.project)
    binary = compose.find_compose(config.values)
    with down_locked(config, target):
        if override.is_file():
            files = (*files, override)
        with spinner(f"stopping {config.project}"):
            stopped = _compose_down(
                binary, config.project, files, compose.compose_environment(config.values)
            )
    if not stopped.ok:
        raise DockerError(
            f"compose down failed for {config.project}: {stopped.last_error_line()}",
            hint="pass the compose files (-f) and settings that `drgpu up` started it with",
        )


@contextmanager
def down_locked(config: Config, target: Target) -> Iterator[None]:
    """Hold the engine-wide lock for a `down` of the target's run (see `guard`), its
    `.drgpu` folder checked first (not created)."""
    from drgpu.commands import guard

    state_dir(target.env_file, create=False)
    with guard.locked("down", config.project, config.values):
        yield


def bring_down(
    binary: tuple[str, ...], project: str, files: tuple[Path, ...], environment: dict[str, str]
) -> bool:
    return _compose_down(binary, project, files, environment).ok


def _compose_down(
    binary: tuple[str, ...], project: str, files: tuple[Path, ...], environment: dict[str, str]
) -> Completed:
    from drgpu.host import compose, process

    command = compose.compose_command(binary, project, files, "down", "--remove-orphans")
    return process.run(command, env=environment)


def _compose_hint(stderr: str) -> str | None:
    if "could not select device driver" in stderr:
        return "the NVIDIA container toolkit is missing, or dockerd was not restarted after it"
    if "unknown device" in stderr:
        return "a planned GPU is unknown to the NVIDIA container toolkit: run `drgpu gpus`"
    if "!override" in stderr or "!reset" in stderr:
        return "drgpu needs Docker Compose >= 2.24.4 (for !override and !reset)"
    return None
