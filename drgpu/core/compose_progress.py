"""What `drgpu up` tells about each service while the stack starts: Compose's own progress
(`compose --progress json`: a JSON object per line), then drgpu's verification."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from drgpu.core.numbers import is_digits

# Compose's objects that are no service of the stack: not shown, unless they fail.
_QUIET_KINDS = ("Network", "Volume")


@dataclass(frozen=True)
class ProgressEvent:
    """A service (or an image Compose pulls) reached a state."""

    subject: str
    state: str
    failed: bool = False


def compose_event(line: str, project: str) -> ProgressEvent | None:
    """The event of one line of `compose --progress json` (None for any other line, and for
    networks and volumes that did not fail)."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("id"), str):
        return None
    kind, _, name = data["id"].partition(" ")
    failed = data.get("status") == "Error"
    state = str(data.get("text") or data.get("status") or "")
    if kind.startswith("service:"):  # `service:<name>:<n>`, when a container fails
        return ProgressEvent(kind.split(":")[1], state, failed)
    if not name:  # while pulling, Compose names the service alone
        return ProgressEvent(kind, state, failed)
    if kind in _QUIET_KINDS and not failed:
        return None
    subject = service_of(name, project) if kind == "Container" else f"{kind.lower()} {name}"
    return ProgressEvent(subject, state, failed)


# Compose's plain progress (no terminal): ` Container deepracer-0-sagemaker-1  Started`;
# compiled when first used (`re` caches it), not when `drgpu up` starts.
_PLAIN = (
    r"^\s*(?P<kind>Container|Image)\s+(?P<name>\S+)\s+(?P<state>Creating|Created|Starting|"
    r"Started|Running|Waiting|Healthy|Pulling|Pulled|Recreate|Recreated|Error)\b(?P<rest>.*)$"
)


def plain_compose_event(line: str, project: str) -> ProgressEvent | None:
    """The event of one line of Compose's plain progress (DRfC's start script's), or None."""
    if (found := re.match(_PLAIN, line)) is None:
        return None
    name = found["name"]
    subject = service_of(name, project) if found["kind"] == "Container" else f"image {name}"
    failed = found["state"] == "Error"
    state = f"{found['state']}{found['rest']}".strip() if failed else found["state"]
    return ProgressEvent(subject, state, failed)


def log_line(line: str) -> str:
    """A line of `compose --progress json` that is no progress, as Compose writes it without
    that mode: a warning as logrus does (`level=warning msg="..."`), an error as its message."""
    try:
        data = json.loads(line)
    except ValueError:
        return line
    if not isinstance(data, dict):
        return line
    if data.get("error") and isinstance(data.get("message"), str):
        return str(data["message"])
    if isinstance(data.get("level"), str) and isinstance(data.get("msg"), str):
        if data["level"] in ("warning", "warn"):
            return f"level=warning msg={json.dumps(data['msg'])}"
        return str(data["msg"])
    return line


def service_of(container: str, project: str) -> str:
    """`robomaker-2` of container `deepracer-0-robomaker-2-1` (Compose's `<project>-<service>-<n>`);
    a container named otherwise (container_name:) stands for itself."""
    rest = container.removeprefix(f"{project}-")
    if rest == container:
        return container
    service, _, number = rest.rpartition("-")
    return service if service and is_digits(number) else rest


def verification_events(
    containers: list[tuple[str, str]], problems: list[str]
) -> list[ProgressEvent]:
    """One event per (container, service): verified, or not, by the problems that name it."""
    events = []
    for name, service in containers:
        own = [p.removeprefix(f"{name}: ") for p in problems if p.startswith(f"{name}: ")]
        state = f"NOT verified: {own[0]}" if own else "verified"
        events.append(ProgressEvent(service, state, failed=bool(own)))
    return events
