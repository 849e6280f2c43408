"""`drgpu render`: the text of each target (Compose override, Swarm stack, Kubernetes
manifests), as printed (secret values masked) and as written to a file (real values)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from drgpu.errors import ConfigError
from drgpu.host.files import override_header_template

if TYPE_CHECKING:
    from drgpu.commands.preparation import Prepared


@dataclass(frozen=True)
class Rendered:
    """A rendered target: `shown` for stdout, `text` for a file, and warnings about it."""

    shown: str
    text: str
    warnings: tuple[str, ...]


def rendered(prepared: Prepared, *, swarm: bool, k8s: bool, dra: bool, this_host: bool) -> Rendered:
    """The target the options ask for; `this_host`: planned on this host (not --inventory),
    so the Swarm stack is laid out for this engine's swarm."""
    if swarm and k8s:
        raise ConfigError("--swarm and --k8s exclude each other")
    if dra and not k8s:
        raise ConfigError("--dra goes with --k8s (Kubernetes dynamic resource allocation)")
    if k8s:
        from drgpu.host.compose import resolve_stack
        from drgpu.targets.kubernetes import render_manifests

        model = resolve_stack(prepared.config, prepared.stack.files)
        manifests = render_manifests(
            prepared.plan,
            model,
            workers=prepared.config.workers,
            sharing=prepared.config.sharing,
            dra=dra,
        )
        return Rendered(manifests.shown_text, manifests.text, manifests.warnings)
    if prepared.config.deploys_to_swarm(swarm):
        from drgpu.commands import swarm_deploy

        engine, blind = swarm_deploy.this_swarm() if this_host else (None, None)
        stack = swarm_deploy.render(prepared, engine)
        warnings = (*stack.warnings, *([blind] if blind else []))
        return Rendered(stack.shown_text, stack.text, warnings)
    from drgpu.core.redaction import masked_plan
    from drgpu.targets.compose_override import render_override

    header = override_header_template()
    shown = render_override(masked_plan(prepared.plan), header)
    return Rendered(shown, render_override(prepared.plan, header), ())
