"""The NVIDIA container toolkit on this node: its version and its runtime's config.toml
(`mode`, `swarm-resource`), judged for Swarm's generic resources and for EGL; which versions
and modes fail, and why: docs/nvidia-stack.md."""

from __future__ import annotations

import re
from dataclasses import dataclass

JIT_CDI_DEFAULT = (1, 18, 0)  # the first toolkit whose `auto` mode is jit-cdi
SWARM_RESOURCE_AGAIN = (1, 19, 0)  # the first that honours swarm-resource in (jit-)cdi mode
EGL_LIMITED = (1, 20, 0)  # the first whose jit-cdi mode limits EGL/Vulkan to the given GPUs
MODE_FIX = 'set mode = "legacy" under [nvidia-container-runtime] in the toolkit\'s config.toml'
_VERSION = re.compile(r"version\s+v?(\d+)\.(\d+)\.(\d+)", re.IGNORECASE)
_STRING = re.compile(r"""^\s*([\w-]+)\s*=\s*(?:"([^"]*)"|'([^']*)')\s*(?:#.*)?$""")
_TABLE = re.compile(r"^\s*\[([^\]]+)\]")


@dataclass(frozen=True)
class ToolkitFacts:
    """The toolkit's version (None: no CLI answered) and its config.toml (None: not written)."""

    version: tuple[int, int, int] | None
    mode: str | None
    swarm_resource: str | None = None
    config_found: bool = True

    @property
    def version_text(self) -> str:
        """`1.18.0`, or `?`."""
        return ".".join(map(str, self.version)) if self.version else "?"

    @property
    def effective_mode(self) -> str | None:
        """The mode the runtime runs in: `auto` (or none written) is jit-cdi from 1.18,
        legacy before; None when the version is unknown and config.toml names no mode."""
        if self.mode not in (None, "auto"):
            return self.mode
        if self.version is None:
            return None
        return "jit-cdi" if self.version >= JIT_CDI_DEFAULT else "legacy"


def parse_version(output: str) -> tuple[int, int, int] | None:
    """The version on the first line of `nvidia-ctk --version` ("NVIDIA Container Toolkit
    CLI version 1.18.0") or `nvidia-container-runtime --version` (later lines: runc's)."""
    match = _VERSION.search((output.strip().splitlines() or [""])[0])
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def config_string(text: str, key: str, table: str = "") -> str | None:
    """The string `key` of config.toml's `[table]` ("": the top level, before the first
    table); None where it is not written."""
    current = ""
    for line in text.splitlines():
        if heading := _TABLE.match(line):
            current = heading[1].strip()
        elif (entry := _STRING.match(line)) and (entry[1], current) == (key, table):
            return entry[2] if entry[2] is not None else entry[3]
    return None


def generic_resources_problem(toolkit: ToolkitFacts) -> str | None:
    """Why Swarm tasks that reserve generic resources would get no GPU from this toolkit
    (its fix included), or None."""
    mode, version = toolkit.effective_mode, toolkit.version
    if mode in (None, "legacy") or (
        version is not None and not JIT_CDI_DEFAULT <= version < SWARM_RESOURCE_AGAIN
    ):
        return None
    if version is None:
        return (
            f"the runtime's mode is {mode!r} and the toolkit's version is unknown: 1.18.x in"
            f" that mode ignores swarm-resource (tasks reserving NVIDIA-GPU get no GPU);"
            f" {MODE_FIX}, or make sure the toolkit is 1.19+"
        )
    written = f"mode = {toolkit.mode!r}" if toolkit.mode else "no mode written (auto)"
    return (
        f"toolkit {toolkit.version_text} runs in mode {mode} ({written}), which ignores"
        f" swarm-resource: tasks reserving NVIDIA-GPU get no GPU; {MODE_FIX},"
        " or upgrade the toolkit to 1.19+"
    )


def egl_problem(toolkit: ToolkitFacts) -> str | None:
    """Why a container's EGL or Vulkan (a simulator's rendering) may reach every GPU with
    this toolkit (jit-cdi mode before 1.20), its fix included; or None."""
    version = toolkit.version
    if toolkit.effective_mode != "jit-cdi" or version is None or version >= EGL_LIMITED:
        return None
    return (
        f"toolkit {toolkit.version_text} in jit-cdi mode does not limit EGL/Vulkan to the"
        f" container's GPUs: Gazebo may render on another GPU than the simulator's;"
        f" {MODE_FIX}, or upgrade the toolkit to 1.20+"
    )
