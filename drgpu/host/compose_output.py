"""What Compose (and the scripts that call it) print, interpreted: warnings, progress lines
(dropped), the rest, and the hint a failure's words call for. Pure: text in, lines out."""

from __future__ import annotations

import re

# Compose v2 logs `time="..." level=warning msg="..."`; older ones and the docker CLI
# `WARN[0000] ...` or `WARNING: ...`. `re` compiles (and caches) each at its first use.
_LOGRUS = r'\blevel=(?P<level>warning|warn)\b.*?\bmsg="(?P<msg>(?:[^"\\]|\\.)*)"'
_SHORT = r"^\s*(?:WARN\[\d+\]|WARNING:)\s*(?P<msg>.+)$"
# ` Container deepracer-0-rl_coach-1  Started`, ` Network x  Created`, `[+] Running 3/3`
_PROGRESS = (
    r"^\s*(?:\[\+\]\s.*|(?:Container|Network|Volume|Image)\s+\S+\s+"
    r"(?:Creating|Created|Starting|Started|Stopping|Stopped|Removing|Removed|Recreate|"
    r"Recreated|Running|Waiting|Healthy|Exited|Pulling|Pulled|Skipped|Warning)\b.*)$"
)


def compose_warnings(text: str) -> tuple[str, ...]:
    """Compose's warnings in `text` (its stderr), each once, in order."""
    found = dict.fromkeys(_warning(line) for line in text.splitlines())
    return tuple(message for message in found if message)


def _warning(line: str) -> str | None:
    """The message of a warning line of Compose's (None for any other line), without the
    "Warning: " some messages begin with (drgpu says "warning" itself)."""
    if logrus := re.search(_LOGRUS, line):
        message = re.sub(r"\\(.)", r"\1", logrus["msg"])
    elif short := re.match(_SHORT, line):
        message = short["msg"]
    else:
        return None
    return re.sub(r"^\s*warning:\s*", "", message, flags=re.IGNORECASE).strip()


def talk_lines(stdout: str, stderr: str) -> tuple[str, ...]:
    """What a start or stop script said to its user: its own lines, without Compose's
    progress lines and warnings (shown on their own)."""
    return tuple(
        line.rstrip()
        for line in (*stdout.splitlines(), *stderr.splitlines())
        if line.strip() and not re.match(_PROGRESS, line) and _warning(line) is None
    )


def failure_hint(stderr: str) -> str | None:
    """What to do about a failed `compose up`, from what it said (None: nothing known)."""
    if "could not select device driver" in stderr:
        return "the NVIDIA container toolkit is missing, or dockerd was not restarted after it"
    if "unknown device" in stderr:
        return "a planned GPU is unknown to the NVIDIA container toolkit: run `drgpu gpus`"
    if "!override" in stderr or "!reset" in stderr:
        return "drgpu needs Docker Compose >= 2.24.4 (for !override and !reset)"
    return None
