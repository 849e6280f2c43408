"""Secrets kept out of every output: settings tables, documents and free text."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from drgpu.core.model import Plan
from drgpu.core.secrets import MASK, is_secret, masked

# Shorter secret values are not searched for in free text: masking every "1" of a
# message would hide more than it protects.
SHORTEST_REDACTED = 4


def masked_items(items: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """(name, value) pairs as drgpu may print them."""
    return tuple((name, masked(name, value)) for name, value in items)


def secret_values(settings: Mapping[str, str]) -> tuple[str, ...]:
    """The values of `settings` that must never appear in any output, longest first."""
    found = {
        value
        for name, value in settings.items()
        if is_secret(name) and len(value) >= SHORTEST_REDACTED
    }
    return tuple(sorted(found, key=len, reverse=True))


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of each secret value replaced by the mask."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def masked_plan(plan: Plan) -> Plan:
    """`plan` as drgpu may print it: every secret environment value masked."""
    return replace(
        plan,
        services=tuple(
            replace(service, environment=masked_items(service.environment))
            for service in plan.services
        ),
    )


def holds_secret(plan: Plan) -> bool:
    """Whether any service of `plan` is given a secret value (its file must stay private)."""
    return any(
        value and is_secret(name)
        for service in plan.services
        for name, value in service.environment
    )
