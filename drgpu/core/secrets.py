"""Which settings are secrets, and how drgpu shows them: never in full."""

from __future__ import annotations

import re

SECRET_MARKERS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL")
MASK = "****"
# An S3 object key (DR_LOCAL_S3_REWARD_KEY, METRICS_S3_OBJECT_KEY) names a file in a
# bucket: no secret, unless the name says access or secret.
_S3_OBJECT_KEY = r"(?:^|_)S3_(?!.*(?:ACCESS|SECRET|TOKEN|PASS|CREDENTIAL)).*KEY$"


def is_secret(name: str) -> bool:
    """Whether a setting's value must never be printed (by its name, an S3 object key aside)."""
    upper = name.upper()
    return any(m in upper for m in SECRET_MARKERS) and not re.search(_S3_OBJECT_KEY, upper)


def masked(name: str, value: str) -> str:
    """`value` as drgpu may print it."""
    return MASK if value and is_secret(name) else value
