"""Which settings are secrets, and how they are kept out of every output: settings tables,
documents and free text."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from drgpu.core.model import Plan

SECRET_MARKERS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL")
MASK = "****"
# An S3 object key (DR_LOCAL_S3_REWARD_KEY, METRICS_S3_OBJECT_KEY) names a file in a
# bucket: no secret, unless the name says access or secret, or an API or encryption key
# (DR_LOCAL_S3_API_KEY, DR_UPLOAD_S3_SSE_C_KEY).
_SECRET_S3_KEY = "ACCESS|SECRET|TOKEN|PASS|CREDENTIAL|API_|SSE_|ENCRYPTION|PRIVATE"
_S3_OBJECT_KEY = rf"(?:^|_)S3_(?!.*(?:{_SECRET_S3_KEY})).*KEY$"

# Shorter secret values are not searched for in free text: masking every "1" of a
# message would hide more than it protects.
SHORTEST_REDACTED = 4
URL_PASSWORD = r"://([^/@:\s]*):([^/@\s]+)@"  # a URL's user info: user and password


def is_secret(name: str) -> bool:
    """Whether a setting's value must never be printed (by its name, an S3 object key aside)."""
    upper = name.upper()
    return any(m in upper for m in SECRET_MARKERS) and not re.search(_S3_OBJECT_KEY, upper)


def masked(name: str, value: str) -> str:
    """`value` as drgpu may print it."""
    return MASK if value and is_secret(name) else value


def secret_values(settings: Mapping[str, str]) -> tuple[str, ...]:
    """The values of `settings` that must never appear in any output, longest first: those
    of secret names, and each password in a URL's user info (with its user where short)."""
    found = {value for name, value in settings.items() if is_secret(name)}
    for value in settings.values():
        for user, password in re.findall(URL_PASSWORD, value):
            found.add(password if len(password) >= SHORTEST_REDACTED else f"{user}:{password}")
    return tuple(sorted((v for v in found if len(v) >= SHORTEST_REDACTED), key=len, reverse=True))


def service_secrets(services: Mapping[str, Any]) -> tuple[str, ...]:
    """`secret_values` of every Compose service's environment (a resolved model's)."""
    found = {
        secret
        for body in services.values()
        if isinstance(body.get("environment"), Mapping)
        for secret in secret_values(
            {str(k): str(v) for k, v in body["environment"].items() if v is not None}
        )
    }
    return tuple(sorted(found, key=len, reverse=True))


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of each secret value replaced by the mask."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def masked_plan(plan: Plan, secrets: Iterable[str] = ()) -> Plan:
    """`plan` as drgpu may print it: secret values masked, and each of `secrets` and of its
    own secret values masked wherever it is passed on (under another name)."""
    own = secret_values({name: value for s in plan.services for name, value in s.environment})
    found = sorted({*secrets, *own}, key=len, reverse=True)
    services = (
        replace(s, environment=tuple((n, redact(masked(n, v), found)) for n, v in s.environment))
        for s in plan.services
    )
    return replace(plan, services=tuple(services))


def masked_data(data: Any, secrets: Iterable[str]) -> Any:
    """A document (mappings, lists, text) with each of `secrets` masked in its texts (the
    longest first: a secret inside another is not left half shown), before YAML or JSON
    escapes a value (`\\xE4`) where a search of the encoded text would miss it."""
    found = tuple(sorted(set(secrets), key=len, reverse=True))

    def masked_in(data: Any) -> Any:
        if isinstance(data, str):
            return redact(data, found)
        if isinstance(data, Mapping):
            return {key: masked_in(value) for key, value in data.items()}
        if isinstance(data, list | tuple):
            return [masked_in(item) for item in data]
        return data

    return masked_in(data)


def holds_secret(plan: Plan) -> bool:
    """Whether any service of `plan` is given a secret value (its file must stay private)."""
    return any(
        value and is_secret(name)
        for service in plan.services
        for name, value in service.environment
    )
