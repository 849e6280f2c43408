"""`drgpu render`: the text of each target (Compose override, Swarm stack, Kubernetes
manifests), as printed (secret values masked) and as written to a file (real values)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from drgpu.commands.options import resolved, settings
from drgpu.commands.preparation import Prepared, inventory_file_offered, prepare_with
from drgpu.core.inputs import InputOptions, Inputs
from drgpu.core.redaction import masked_plan
from drgpu.core.seal import is_sealed, sealed
from drgpu.core.settings import Config
from drgpu.errors import ConfigError
from drgpu.host.files import override_header_template
from drgpu.host.state_files import read_own_output, write_owned_file
from drgpu.targets.compose_override import Rendered, render_override

if TYPE_CHECKING:
    from drgpu.core.facts import EngineFacts
    from drgpu.core.service_gpus import SwarmStack


@dataclass(frozen=True)
class RenderOptions:
    """`drgpu render`'s options: `output` is a file to write (else stdout shows it)."""

    inputs: InputOptions
    inventory: Path | None = None
    output: Path | None = None
    swarm: bool = False
    k8s: bool = False
    dra: bool = False


def render(options: RenderOptions) -> Rendered:
    """Plan and render the target the options ask for, written to `options.output` if given
    (real values, mode 600 if secret, a checksum line last), the plan's warnings too."""
    target = resolved(options.inputs)
    config = settings(target)
    config.refuse_key_mistakes()
    drfc_swarm = _drfc_swarm(options, target, config)
    if drfc_swarm:  # what `up` hands DRfC's start script: the override of its own files
        from drgpu.commands import drfc_stack  # lazy: start-up time outside DRfC

        target = drfc_stack.script_target(target, config)
    with inventory_file_offered():
        prepared = prepare_with(config, target, options.inventory, swarm=options.swarm)
    if drfc_swarm:  # the swarm-shaped override DRfC's `docker stack deploy -c ...` merges
        result = _swarm(drfc_stack.render_swarm, prepared, this_host=options.inventory is None)
    else:
        result = _rendered(prepared, options)
    if options.output is not None:
        _refuse_edited(options.output)
        write_owned_file(options.output, sealed(result.text), private=result.shown != result.text)
    warnings = (*(finding.message for finding in prepared.plan.warnings), *result.warnings)
    return replace(result, warnings=warnings)


def _drfc_swarm(options: RenderOptions, target: Inputs, config: Config) -> bool:
    """Whether `up` would run the activated swarm-style DRfC checkout's own start script
    with drgpu's swarm override (then that override is what render shows)."""
    if options.k8s or options.inputs.compose_files is not None or target.checkout is None:
        return False
    from drgpu.commands import drfc_stack  # lazy: start-up time outside DRfC

    return config.deploys_to_swarm() and drfc_stack.runs_scripts(target, explicit_files=False)


def _swarm(
    render_stack: Callable[[Prepared, EngineFacts | None], SwarmStack],
    prepared: Prepared,
    *,
    this_host: bool,
) -> Rendered:
    """A Swarm stack file `render_stack` makes; `this_host`: laid out for this engine's swarm."""
    from drgpu.host.swarm_engine import this_swarm

    engine, blind = this_swarm() if this_host else (None, None)
    stack = render_stack(prepared, engine)
    return Rendered(stack.shown_text, stack.text, (*stack.warnings, *([blind] if blind else [])))


def _refuse_edited(path: Path) -> None:
    """Refuse to replace `path` unless drgpu wrote it and no one changed it since (its
    checksum line, `drgpu.core.seal`)."""
    try:
        data = read_own_output(path)
    except ConfigError:  # larger than any file drgpu writes, or unreadable: not drgpu's
        data = b""
    if data is not None and not is_sealed(data.decode("utf-8", "replace")):
        raise ConfigError(
            f"refusing to overwrite {path}: drgpu did not write it, or it was changed since"
            " (its last line, drgpu's checksum, no longer matches)",
            hint="move that file away or remove it, or pass another --output path",
        )


def _rendered(prepared: Prepared, options: RenderOptions) -> Rendered:
    """The target the options ask for (without --inventory, a Swarm stack laid out for this
    engine's swarm)."""
    if options.swarm and options.k8s:
        raise ConfigError("--swarm and --k8s exclude each other")
    if options.dra and not options.k8s:
        raise ConfigError("--dra goes with --k8s (Kubernetes dynamic resource allocation)")
    secrets = prepared.config.secrets  # masked in the data, before encoding
    if options.k8s:
        from drgpu.host.compose import resolve_stack  # lazy: start-up time of the other targets
        from drgpu.targets.kubernetes import render_manifests  # lazy: the same

        model = resolve_stack(prepared.config, prepared.stack.files)
        return render_manifests(
            prepared.plan,
            model,
            workers=prepared.config.simulators,
            sharing=prepared.config.sharing,
            dra=options.dra,
            secrets=secrets,
        )
    if prepared.config.deploys_to_swarm(options.swarm):
        from drgpu.commands import swarm_deploy  # lazy: start-up time of the other targets

        return _swarm(swarm_deploy.render, prepared, this_host=options.inventory is None)
    header = override_header_template()
    shown = render_override(masked_plan(prepared.plan, secrets), header)
    return Rendered(shown, render_override(prepared.plan, header), ())
