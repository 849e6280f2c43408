"""`drgpu doctor`: gather the host's facts (NVML, the engine, Compose, the settings file);
core.host_checks judges them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from drgpu.commands.options import resolved, settings
from drgpu.commands.preparation import stack_files
from drgpu.core import host_checks as checks
from drgpu.core.facts import ImageFacts
from drgpu.core.findings import Finding, Level
from drgpu.core.inputs import InputOptions, Inputs
from drgpu.core.model import GpuHealth, Inventory
from drgpu.core.settings import Config
from drgpu.errors import (
    CheckFailedError,
    ConfigError,
    DockerError,
    DrgpuError,
    NvmlUnavailableError,
)
from drgpu.host import compose, container_toolkit, engine, files, nvml, process
from drgpu.ui.talk import spinner

T = TypeVar("T")


@dataclass(frozen=True)
class DoctorResult:
    """Every check of the host, in the order a person would fix things."""

    checks: list[Finding]

    @property
    def failure(self) -> CheckFailedError | None:
        """The failed checks (exit 6; warnings pass), with the first one's fix."""
        failed = [check for check in self.checks if check.level == Level.FAIL]
        if not failed:
            return None
        return CheckFailedError(
            f"{len(failed)} check(s) failed: {', '.join(check.kind for check in failed)}",
            hint=failed[0].fix,
        )


def doctor(inputs: InputOptions, images: list[str], *, probe: bool) -> DoctorResult:
    """Gather the host's facts (behind a spinner) and judge them: also `images` (the first
    is the one `probe` starts in a short container with a GPU device request)."""
    with spinner("checking the host"):
        facts = gather(resolved(inputs), images, probe)
    return DoctorResult(checks.run_checks(facts))


def gather(target: Inputs, images: list[str], probe: bool) -> checks.HostFacts:
    """Ask NVML, the engine, Compose and the settings file; every failure becomes a fact."""
    errors: dict[str, tuple[str, str | None]] = {}

    def ask(kind: str, catch: type[DrgpuError], question: Callable[[], T]) -> T | None:
        try:
            return question()
        except catch as exc:
            errors[kind] = (exc.message, exc.hint)
            return None

    config = ask("settings", ConfigError, lambda: settings(target, quiet=True))
    inventory, persistence, health = ask("nvml", NvmlUnavailableError, _ask_nvml) or (None, (), ())
    hook = files.hook_installed()
    daemon = ask("docker", DockerError, engine.daemon_facts)
    values = config.values if config is not None else {}
    compose_version = ask("compose", DockerError, lambda: _compose_version(values))
    used, simulator_image = _stack_images(config, target)
    checked: dict[str, ImageFacts | None] = {}
    probe_image = (images[0] if images else simulator_image) if probe else None  # a checked one
    probe_error = None
    if daemon is not None:
        try:
            checked = {name: engine.local_image(name) for name in dict.fromkeys([*images, *used])}
            if probe_image is not None and checked[probe_image] is not None:
                probe_error = engine.try_device_request(probe_image)
        except DrgpuError as exc:
            errors["docker"], daemon = (exc.message, exc.hint), None
    return checks.HostFacts(
        target.env_file,
        config,
        inventory,
        persistence,
        daemon,
        hook,
        compose_version,
        checked,
        probe_image,
        probe_error,
        toolkit=container_toolkit.read()[0],
        device_nodes=files.nvidia_device_nodes(),
        char_links=files.char_links(),
        drfc_swarm=ask("drfc-swarm", DockerError, lambda: _drfc_swarm(config, target)),
        errors=errors,
        health=health,
    )


def _drfc_swarm(config: Config | None, target: Inputs) -> tuple[tuple[str, str], ...] | None:
    """In a swarm-style DRfC shell, what would stop DRfC's swarm start (`jq`, node labels)."""
    import shutil  # lazy: start-up time of doctor outside DRfC

    from drgpu.core import drfc_scripts  # lazy: as above
    from drgpu.host import swarm_engine  # lazy: as above

    if config is None or target.checkout is None or not config.deploys_to_swarm():
        return None
    facts = swarm_engine.engine_facts()
    if facts.swarm_state != "active":
        raise DockerError("this engine is in no swarm")
    jq_found = shutil.which(drfc_scripts.JQ) is not None
    return tuple(drfc_scripts.swarm_preflight(target.checkout, facts, jq_found=jq_found))


def _stack_images(config: Config | None, target: Inputs) -> tuple[tuple[str, ...], str | None]:
    """The images of the target's stack as Compose resolves them, and the one `--probe` starts;
    without Compose, those drgpu's base stack names (another stack's are then unknown)."""
    if config is not None:
        try:
            model = compose.resolve_stack(config, stack_files(target))
            return checks.resolved_images(model["services"])
        except DrgpuError:
            pass  # the compose check says why
    if target.compose_files is None:
        trainer, simulator = checks.stack_images(config.values if config else {})
        return (trainer, simulator), simulator
    return (), None


def _ask_nvml() -> tuple[Inventory, tuple[bool | None, ...], tuple[GpuHealth, ...]]:
    with nvml.nvml_session() as session:
        inventory = nvml.inventory_from_nvml(session)
        health = nvml.health_from_nvml(session, len(inventory.gpus))
        return inventory, nvml.persistence_modes(session), health


def _compose_version(values: Mapping[str, str]) -> str:
    done = process.run([*compose.find_compose(values), "version", "--short"], timeout=30)
    if not done.ok:
        raise DockerError(done.last_error_line())
    return done.stdout
