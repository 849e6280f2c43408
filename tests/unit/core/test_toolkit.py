"""The NVIDIA container toolkit's version and runtime mode, read from its own words."""

from __future__ import annotations

import pytest

from drgpu.core.toolkit import (
    ToolkitFacts,
    config_string,
    egl_problem,
    generic_resources_problem,
    parse_version,
)

CTK = "NVIDIA Container Toolkit CLI version 1.18.0\ncommit: 7f6b8e0\n"
RUNTIME = (
    "NVIDIA Container Runtime version 1.17.8\ncommit: f202b80\nspec: 1.2.1\n\n"
    "runc version 1.2.5\ncommit: v1.2.5-0-g59923ef\n"
)
CONFIG = """\
#accept-nvidia-visible-devices-as-volume-mounts = false
swarm-resource = "DOCKER_RESOURCE_NVIDIA-GPU"

[nvidia-container-cli]
#mode = "not this one"

[nvidia-container-runtime]
log-level = "info"
mode = "legacy"  # Swarm's generic resources

[nvidia-container-runtime.modes.cdi]
default-kind = "nvidia.com/gpu"
"""


def test_versions_come_from_the_first_line_only() -> None:
    assert parse_version(CTK) == (1, 18, 0)
    assert parse_version(RUNTIME) == (1, 17, 8)  # never runc's 1.2.5
    assert parse_version("") is None
    assert parse_version("runc\nversion 1.2.5") is None


def test_the_mode_is_the_runtimes_own() -> None:
    assert config_string(CONFIG, "mode", "nvidia-container-runtime") == "legacy"
    written = CONFIG.replace('mode = "legacy"', "#mode = 'cdi'")
    assert config_string(written, "mode", "nvidia-container-runtime") is None


def test_auto_is_jit_cdi_from_1_18_and_ignores_swarm_resource_until_1_19() -> None:
    assert ToolkitFacts((1, 17, 8), None).effective_mode == "legacy"
    assert ToolkitFacts((1, 18, 1), "auto").effective_mode == "jit-cdi"
    assert ToolkitFacts(None, None).effective_mode is None
    problem = generic_resources_problem(ToolkitFacts((1, 18, 1), None))
    assert problem is not None and "no mode written (auto)" in problem
    assert generic_resources_problem(ToolkitFacts((1, 18, 1), "legacy")) is None
    assert generic_resources_problem(ToolkitFacts((1, 19, 0), "jit-cdi")) is None
    assert generic_resources_problem(ToolkitFacts((1, 17, 0), "auto")) is None
    unknown = generic_resources_problem(ToolkitFacts(None, "cdi"))
    assert unknown is not None and "version is unknown" in unknown


@pytest.mark.parametrize(
    ("version", "mode", "limited"),
    [
        ((1, 19, 0), None, False),  # auto: jit-cdi from 1.18
        ((1, 19, 0), "cdi", True),
        ((1, 17, 8), None, True),  # auto: legacy before 1.18
        ((1, 20, 0), None, True),
        (None, "jit-cdi", True),  # an unknown version is not guessed at
    ],
)
def test_jit_cdi_before_1_20_lets_egl_and_vulkan_reach_every_gpu(
    version: tuple[int, int, int] | None, mode: str | None, limited: bool
) -> None:
    problem = egl_problem(ToolkitFacts(version, mode))
    assert (problem is None) is limited
    assert limited or "does not limit EGL/Vulkan to the container's GPUs" in (problem or "")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (
            'disable-require = false\nswarm-resource = "DOCKER_RESOURCE_NVIDIA-GPU"\n',
            "DOCKER_RESOURCE_NVIDIA-GPU",
        ),
        ('#swarm-resource = "DOCKER_RESOURCE_GPU"\n', None),
        ("swarm-resource = 'A,B' # two\n", "A,B"),
        ('[nvidia-container-cli]\nswarm-resource = "X"\n', None),
    ],
)
def test_swarm_resource_is_read_from_the_top_level_only(text: str, value: str | None) -> None:
    assert config_string(text, "swarm-resource") == value
