"""Which container a host process (NVML reports host PIDs) runs in, from the cgroup path in
its /proc/<pid>/cgroup (`host.procs` reads it): Docker (cgroupfs and systemd drivers), Podman
(root and rootless), containerd and CRI-O under Kubernetes, for cgroup v1 and v2."""

from __future__ import annotations

import re
from dataclasses import dataclass

_ID = r"(?P<id>[0-9a-f]{64})"
# One path component each, most specific first. A component that names no container
# (a conmon scope, a pod slice) is skipped; the deepest match wins (Docker in Docker).
_COMPONENTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("podman", re.compile(rf"^libpod-{_ID}\.scope$")),
    ("docker", re.compile(rf"^docker-{_ID}\.scope$")),
    ("containerd", re.compile(rf"^cri-containerd-{_ID}\.scope$")),
    ("cri-o", re.compile(rf"^crio-{_ID}\.scope$")),
    ("podman", re.compile(rf"^libpod-{_ID}$")),
)
_BARE_ID = re.compile(rf"^{_ID}$")


@dataclass(frozen=True)
class CgroupOwner:
    """The container a cgroup path names: its runtime and full 64-hex id."""

    runtime: str
    container_id: str


def owner_from_cgroup(text: str) -> CgroupOwner | None:
    """The container named by the contents of a /proc/<pid>/cgroup file, or None (a host
    process). The cgroup v2 line (`0::/...`) is read first, then the v1 lines in order."""
    lines = [line.strip() for line in text.splitlines()]
    for line in sorted(lines, key=lambda line: not line.startswith("0::")):
        if (owner := owner_from_path(line.split(":", 2)[-1])) is not None:
            return owner
    return None


def owner_from_path(path: str) -> CgroupOwner | None:
    """The container named by one cgroup path, e.g. `/system.slice/docker-<id>.scope`."""
    parts = [part for part in path.split("/") if part]
    for position in reversed(range(len(parts))):
        for runtime, pattern in _COMPONENTS:
            if match := pattern.match(parts[position]):
                return CgroupOwner(runtime, match["id"])
        if match := _BARE_ID.match(parts[position]):
            return CgroupOwner(_bare_id_runtime(parts[:position]), match["id"])
    return None


def _bare_id_runtime(parents: list[str]) -> str:
    """Who created a cgroup named by a bare id, from its parent directories."""
    if any(part.startswith("kubepods") for part in parents):
        return "kubernetes"
    if "libpod_parent" in parents or "machine.slice" in parents:
        return "podman"
    return "docker"
