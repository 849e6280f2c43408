"""`drgpu doctor`: gather the host's facts (NVML, the engine, Compose, the settings file);
core.host_checks judges them."""

from __future__ import annotations

from dataclasses import dataclass

from drgpu.commands.options import resolved, settings
from drgpu.commands.preparation import stack_files
from drgpu.core import host_checks as checks
from drgpu.core.findings import Finding, Level
from drgpu.core.inputs import InputOptions, Inputs
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
    settings = _gather_settings(target)
    config = settings.config
    nvml = _gather_nvml()
    docker = _gather_docker()
    compose = _gather_compose(dict(config.values) if config is not None else {})
    used, simulator_image = _stack_images(config, target)
    names = list(dict.fromkeys([*images, *used]))
    checked: tuple[checks.ImageCheck, ...] = ()
    probe_facts = None
    if docker.daemon is not None:
        try:
            checked = tuple(checks.ImageCheck(name, engine.local_image(name)) for name in names)
            image = images[0] if images else simulator_image
            if probe and image is not None:  # one of `names`
                present = {c.name: c.facts for c in checked}[image] is not None
                error = engine.try_device_request(image) if present else None
                probe_facts = checks.ProbeFacts(image, present, error)
        except DrgpuError as exc:
            docker = checks.DockerFacts(error=exc.message, hint=exc.hint)
    return checks.HostFacts(
        settings,
        nvml,
        docker,
        compose,
        checked,
        probe_facts,
        toolkit=container_toolkit.read()[0],
        device_nodes=checks.DeviceNodeFacts(files.nvidia_device_nodes(), files.char_links()),
        drfc_swarm=_gather_drfc_swarm(config, target),
    )


def _gather_drfc_swarm(config: Config | None, target: Inputs) -> checks.DrfcSwarmFacts | None:
    """In a swarm-style DRfC shell, what would stop DRfC's swarm start (`jq`, node labels)."""
    from drgpu.commands import drfc_stack  # lazy: start-up time of doctor outside DRfC
    from drgpu.host import swarm_engine  # lazy: as above

    if config is None or target.checkout is None or not drfc_stack.swarm_style(config):
        return None
    try:
        facts = swarm_engine.engine_facts()
    except DockerError as exc:
        return checks.DrfcSwarmFacts(error=exc.message)
    if facts.swarm_state != "active":
        return checks.DrfcSwarmFacts(error="this engine is in no swarm")
    return checks.DrfcSwarmFacts(problems=tuple(drfc_stack.swarm_preflight(target.checkout, facts)))


def _gather_settings(target: Inputs) -> checks.SettingsFacts:
    try:
        return checks.SettingsFacts(target.env_file, settings(target, quiet=True))
    except ConfigError as exc:
        return checks.SettingsFacts(target.env_file, error=exc.message, hint=exc.hint)


def _stack_images(config: Config | None, target: Inputs) -> tuple[tuple[str, ...], str | None]:
    """The images the target's stack uses, as Compose resolves its files with these settings,
    and the simulator's (the one `--probe` starts). Without Compose, drgpu's base stack's
    images as its compose file names them; another stack's are then unknown."""
    if config is not None:
        try:
            model = compose.resolve_stack(config, stack_files(target))
            return checks.resolved_images(model["services"])
        except DrgpuError:
            pass  # the compose check says why
    if target.compose_files is None:
        trainer, simulator = checks.stack_images(dict(config.values) if config else {})
        return (trainer, simulator), simulator
    return (), None


def _gather_nvml() -> checks.NvmlFacts:
    try:
        with nvml.nvml_session() as session:
            return checks.NvmlFacts(
                inventory=nvml.inventory_from_nvml(session),
                persistence=nvml.persistence_modes(session),
            )
    except NvmlUnavailableError as exc:
        return checks.NvmlFacts(error=exc.message, hint=exc.hint)


def _gather_docker() -> checks.DockerFacts:
    hook = files.hook_installed()
    try:
        return checks.DockerFacts(daemon=engine.daemon_facts(), hook_on_path=hook)
    except DockerError as exc:
        return checks.DockerFacts(error=exc.message, hint=exc.hint, hook_on_path=hook)


def _gather_compose(values: dict[str, str]) -> checks.ComposeFacts:
    try:
        done = process.run([*compose.find_compose(values), "version", "--short"], timeout=30)
    except DockerError as exc:
        return checks.ComposeFacts(error=exc.message)
    if not done.ok:
        return checks.ComposeFacts(error=done.last_error_line())
    return checks.ComposeFacts(done.stdout)
