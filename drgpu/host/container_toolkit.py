"""The NVIDIA container toolkit installed on this host: its runtime's config.toml and the
version its programs on PATH say (what swarm-setup and doctor judge)."""

from __future__ import annotations

import shutil
from pathlib import Path

from drgpu.core.toolkit import ToolkitFacts, config_string, parse_version
from drgpu.errors import ConfigError, DockerError
from drgpu.host import files, process


def read(config_path: Path = files.TOOLKIT_CONFIG) -> tuple[ToolkitFacts, str | None]:
    """The toolkit's version and its runtime's config.toml (one that cannot be read: none),
    and why that file could not be read (None: it could)."""
    problem = None
    try:
        text = files.optional_text(config_path)
        if text is None:
            problem = "absent: is the NVIDIA container toolkit installed?"
    except ConfigError as exc:
        text, problem = None, exc.message
    mode = config_string(text or "", "mode", "nvidia-container-runtime")
    swarm_resource = config_string(text or "", "swarm-resource")
    return ToolkitFacts(version(), mode, swarm_resource, text is not None), problem


def version() -> tuple[int, int, int] | None:
    """The version the first of the toolkit's programs on PATH says (None: none says)."""
    for program in filter(shutil.which, ("nvidia-ctk", "nvidia-container-runtime")):
        try:
            done = process.run([program, "--version"], timeout=10)
        except DockerError:
            continue
        said = parse_version(done.stdout) if done.ok else None
        if said is not None:
            return said
    return None
