"""`drgpu up` and `down` through Compose: write the override, start, prove, stop."""

from __future__ import annotations

from typing import TYPE_CHECKING

from drgpu.commands.preparation import Prepared, preload_proof, stack_files
from drgpu.commands.rollback import rolled_back
from drgpu.commands.run_lock import down_locked
from drgpu.core.compose_progress import compose_event, log_line
from drgpu.core.inputs import Inputs
from drgpu.core.redaction import holds_secret
from drgpu.core.settings import Config
from drgpu.errors import ConfigError, DockerError
from drgpu.host import compose, process
from drgpu.host.compose_output import compose_warnings, failure_hint
from drgpu.host.files import override_header_template
from drgpu.host.state_files import override_path, write_owned_file, written_by_drgpu
from drgpu.targets.compose_override import render_override
from drgpu.ui.talk import spinner, warn

if TYPE_CHECKING:
    from collections.abc import Callable

    from drgpu.core.compose_progress import ProgressEvent
    from drgpu.core.facts import ContainerFacts
    from drgpu.core.findings import Finding
    from drgpu.host.process import Completed


def up(
    prepared: Prepared, progress: Callable[[ProgressEvent], None]
) -> tuple[list[ContainerFacts], list[Finding]]:
    """Render, start and verify the stack (`proving.verified`), which goes back down on any
    failure or caught signal (`rolled_back`); `progress` hears each service's state."""
    text = render_override(prepared.plan, override_header_template())
    write_owned_file(prepared.override_path, text, private=holds_secret(prepared.plan))
    files = (*prepared.stack.files, prepared.override_path)
    binary = compose.find_compose(prepared.config.values)
    environment = compose.compose_environment(prepared.config.values)
    project = prepared.plan.project
    # --remove-orphans: workers of an earlier DR_WORKERS must not keep their GPUs.
    command = compose.compose_command(binary, project, files, "up", "-d", "--remove-orphans")
    with rolled_back(
        project,
        lambda: compose.compose_down(binary, project, files, environment),
        written=prepared.override_path,
    ):
        with process.meanwhile(preload_proof):
            started = _compose_up(command, environment, project, progress)
        for message in compose_warnings(started.stderr):
            warn(f"compose: {message}")
        if not started.ok:
            raise DockerError(
                f"compose up failed: {started.last_error_line()}",
                hint=failure_hint(started.stderr),
            )
        from drgpu.commands.proving import verified  # imported meanwhile, above

        return verified(prepared.plan, progress)


def _compose_up(
    command: list[str],
    environment: dict[str, str],
    project: str,
    progress: Callable[[ProgressEvent], None],
) -> Completed:
    """`compose up --progress json`, its events for `progress` (plain where Compose lacks it)."""

    def heard(line: str) -> str | None:
        event = compose_event(line, project)
        if event is None:
            return log_line(line)
        progress(event)
        return event.state if event.failed else None

    position = command.index("-p")  # the global flags go before the subcommand
    with_json = [*command[:position], "--progress", "json", *command[position:]]
    started = process.stream(with_json, env=environment, on_line=heard)
    if not started.ok and "progress" in started.last_error_line():  # a Compose before 2.x
        return process.run(command, env=environment)
    return started


def down(config: Config, target: Inputs) -> None:
    """Stop and remove the stack's containers (under the engine-wide lock: see `run_lock`)."""
    files = stack_files(target)
    override = override_path(target.env_file, config.project)
    binary = compose.find_compose(config.values)
    if (override.is_file() or override.is_symlink()) and not written_by_drgpu(override):
        raise ConfigError(
            f"refusing to hand {override} to Compose: drgpu did not write it",
            hint="move that file away: `drgpu up` writes its override there",
        )
    with down_locked(config, target, say_removed=True):
        if override.is_file():
            files = (*files, override)
        with spinner(f"stopping {config.project}"):
            environment = compose.compose_environment(config.values)
            stopped = compose.compose_down(binary, config.project, files, environment)
        if not stopped.ok:
            raise DockerError(
                f"compose down failed for {config.project}: {stopped.last_error_line()}",
                hint="pass the compose files (-f) and settings that `drgpu up` started it with",
            )
