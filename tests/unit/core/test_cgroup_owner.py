"""Which container a PID runs in, from real-world /proc/<pid>/cgroup files."""

from __future__ import annotations

import pytest

from drgpu.core.cgroup_owner import CgroupOwner, owner_from_cgroup, owner_from_path

ID = "a832038fb4e0f6d5f76661f8837e9f04f93655f6b7d1e82265b1c99d0c55feba"
OUTER = "0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d"

# A container of a cgroupfs-driver dockerd on a cgroup v1 (hybrid) host: this test bed.
DOCKER_V1_CGROUPFS = f"""\
9:name=systemd:/docker/{ID}
8:pids:/docker/{ID}
7:blkio:/docker/{ID}
6:freezer:/docker/{ID}
5:devices:/docker/{ID}
4:memory:/docker/{ID}
3:cpuset:/docker/{ID}
2:cpuacct:/docker/{ID}
1:cpu:/docker/{ID}
0::/docker/{ID}
"""
# Ubuntu 20.04, dockerd with the systemd cgroup driver, cgroup v1.
DOCKER_V1_SYSTEMD = f"""\
12:pids:/system.slice/docker-{ID}.scope
11:cpuset:/system.slice/docker-{ID}.scope
10:memory:/system.slice/docker-{ID}.scope
4:cpu,cpuacct:/system.slice/docker-{ID}.scope
1:name=systemd:/system.slice/docker-{ID}.scope
0::/system.slice/docker-{ID}.scope
"""
# Ubuntu 22.04 / Debian 12 (cgroup v2 only), dockerd with the systemd driver.
DOCKER_V2_SYSTEMD = f"0::/system.slice/docker-{ID}.scope\n"
# A hybrid host whose unified line says nothing: the v1 lines name the container.
HYBRID_UNIFIED_ROOT = f"""\
5:memory:/docker/{ID}
1:name=systemd:/docker/{ID}
0::/
"""
# Kubernetes (cgroupfs driver, dockershim or containerd), cgroup v1.
KUBEPODS_V1 = f"""\
11:memory:/kubepods/burstable/pod6f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b/{ID}
1:name=systemd:/kubepods/burstable/pod6f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b/{ID}
"""
# Kubernetes with the systemd driver and containerd, cgroup v2.
KUBEPODS_V2_CONTAINERD = (
    "0::/kubepods.slice/kubepods-besteffort.slice/"
    f"kubepods-besteffort-pod6f1e2d3c_4b5a_6978_8a9b_0c1d2e3f4a5b.slice/cri-containerd-{ID}.scope\n"
)
KUBEPODS_V2_CRIO = (
    "0::/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod6f1e2d3c_4b5a_6978_8a9b_0c1d2e3f4a5b.slice/crio-{ID}.scope\n"
)
# Podman as root: cgroup v1 (systemd manager), cgroup v2, and the cgroupfs manager.
PODMAN_V1 = f"""\
10:memory:/machine.slice/libpod-{ID}.scope
1:name=systemd:/machine.slice/libpod-{ID}.scope
"""
PODMAN_V2 = f"0::/machine.slice/libpod-{ID}.scope/container\n"
PODMAN_CGROUPFS = f"0::/libpod_parent/libpod-{ID}\n"
# Rootless podman, cgroup v2.
PODMAN_ROOTLESS = (
    f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container\n"
)
# Podman's conmon runs beside the container, not in it.
PODMAN_CONMON = f"0::/machine.slice/libpod-conmon-{ID}.scope\n"
# Docker in Docker: the innermost engine's container.
DOCKER_IN_DOCKER = f"0::/docker/{OUTER}/docker/{ID}\n"
HOST_V2 = "0::/user.slice/user-1000.slice/session-2.scope\n"
HOST_V1 = """\
12:pids:/user.slice/user-1000.slice/session-2.scope
1:name=systemd:/user.slice/user-1000.slice/session-2.scope
0::/user.slice/user-1000.slice/session-2.scope
"""
HOST_BED = """\
9:name=systemd:/
4:memory:/process_api/19b84a7541a5c6a44e0593ed081f02b5
0::/
"""


@pytest.mark.parametrize(
    ("text", "runtime", "container_id"),
    [
        (DOCKER_V1_CGROUPFS, "docker", ID),
        (DOCKER_V1_SYSTEMD, "docker", ID),
        (DOCKER_V2_SYSTEMD, "docker", ID),
        (HYBRID_UNIFIED_ROOT, "docker", ID),
        (KUBEPODS_V1, "kubernetes", ID),
        (KUBEPODS_V2_CONTAINERD, "containerd", ID),
        (KUBEPODS_V2_CRIO, "cri-o", ID),
        (PODMAN_V1, "podman", ID),
        (PODMAN_V2, "podman", ID),
        (PODMAN_CGROUPFS, "podman", ID),
        (PODMAN_ROOTLESS, "podman", ID),
        (DOCKER_IN_DOCKER, "docker", ID),
    ],
    ids=[
        "docker-v1-cgroupfs",
        "docker-v1-systemd",
        "docker-v2-systemd",
        "hybrid-unified-root",
        "kubepods-v1",
        "kubepods-v2-containerd",
        "kubepods-v2-crio",
        "podman-v1",
        "podman-v2",
        "podman-cgroupfs",
        "podman-rootless",
        "docker-in-docker",
    ],
)
def test_container_processes_name_their_container(
    text: str, runtime: str, container_id: str
) -> None:
    assert owner_from_cgroup(text) == CgroupOwner(runtime, container_id)


@pytest.mark.parametrize(
    "text",
    [HOST_V2, HOST_V1, HOST_BED, PODMAN_CONMON, "", "garbage\n", "0::/docker/abc123\n"],
    ids=["host-v2", "host-v1", "host-bed", "podman-conmon", "empty", "garbage", "short-id"],
)
def test_host_processes_name_no_container(text: str) -> None:
    assert owner_from_cgroup(text) is None


def test_an_upper_case_or_63_character_id_is_not_a_container_id() -> None:
    assert owner_from_path(f"/docker/{ID.upper()}") is None
    assert owner_from_path(f"/docker/{ID[:63]}") is None


def test_the_v2_line_is_read_before_the_v1_lines() -> None:
    text = f"1:name=systemd:/docker/{OUTER}\n0::/system.slice/docker-{ID}.scope\n"
    assert owner_from_cgroup(text) == CgroupOwner("docker", ID)
