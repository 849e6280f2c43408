"""`drgpu doctor`'s checklist: pure checks of the host's facts (`commands.doctor.gather`),
each yielding findings of level ok, warn or fail, a failure with its one-line fix."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from operator import eq, ge, gt, le, lt
from pathlib import Path
from typing import Any

from drgpu.core.compose_stack import role_of
from drgpu.core.device_driver import DriverChoice, choose, nvidia_cdi_devices, unnamed_in_spec
from drgpu.core.devices import resolve
from drgpu.core.facts import EngineFacts, ImageFacts
from drgpu.core.faults import pending, standing
from drgpu.core.findings import Finding, Level
from drgpu.core.index_order import bare_indices, cuda_order, in_cuda_order
from drgpu.core.model import GpuHealth, Inventory, Role
from drgpu.core.modes import DeviceDriver, IndexOrder
from drgpu.core.planning import x_server_text, x_server_warning
from drgpu.core.settings import DEFAULTS, Config
from drgpu.core.toolkit import ToolkitFacts, egl_problem, generic_resources_problem

PASS, WARN, FAIL = Level.OK, Level.WARN, Level.FAIL
COMPOSE_MIN = (2, 24, 4)  # !override and !reset in override files
COMPOSE_GPUS_KEY = (2, 30, 0)  # the service-level `gpus:` key and CDI device names
DOCKER_MIN = (19, 3, 0)  # device requests
TOOLKIT_FIX = (
    "install the NVIDIA container toolkit (nvidia-container-toolkit), then restart dockerd"
    " (sudo systemctl restart docker)"
)
# The first Linux driver of each CUDA release (CUDA toolkit release notes, table 3).
DRIVER_FOR_CUDA: dict[tuple[int, int], str] = {
    (11, 0): "450.36", (11, 1): "455.23", (11, 2): "460.27", (11, 3): "465.19",
    (11, 4): "470.42", (11, 5): "495.29", (11, 6): "510.39", (11, 7): "515.43",
    (11, 8): "520.61", (12, 0): "525.60", (12, 1): "530.30", (12, 2): "535.54",
    (12, 3): "545.23", (12, 4): "550.54", (12, 5): "555.42", (12, 6): "560.28",
    (12, 8): "570.26", (12, 9): "575.51", (13, 0): "580.65",
}  # fmt: skip
HOOK = "nvidia-container-runtime-hook"
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
_COMPARE = {">=": ge, ">": gt, "<=": le, "<": lt, "=": eq, "==": eq}
_CONDITION = re.compile(r"^(?P<key>[a-z]+)(?P<op>>=|<=|==|=|>|<)(?P<value>\S+)$")


@dataclass(frozen=True)
class HostFacts:
    """Everything doctor judges. What did not answer is None (or empty), and `errors` says
    why, as (message, hint) by the check's kind: settings, nvml, docker, compose, drfc-swarm."""

    env_file: Path
    config: Config | None = None
    inventory: Inventory | None = None  # NVML's
    persistence: tuple[bool | None, ...] = ()  # each GPU's persistence mode
    daemon: EngineFacts | None = None
    hook_on_path: bool = False
    compose_version: str | None = None  # `<compose> version --short`
    images: Mapping[str, ImageFacts | None] = field(default_factory=dict)  # None: not there
    probe_image: str | None = None  # started with an NVIDIA device request (when present)
    probe_error: str | None = None  # the engine's answer to it
    toolkit: ToolkitFacts | None = None
    device_nodes: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # /dev/nvidia*
    char_links: frozenset[str] = frozenset()  # the `major:minor` links in /dev/char
    drfc_swarm: tuple[tuple[str, str], ...] | None = None  # swarm-style DRfC: (problem, fix)
    errors: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)
    health: tuple[GpuHealth, ...] = ()  # NVML's health of each GPU (faults, slowdowns)


def _check(kind: str, level: Level, message: str, fix: str | None = None) -> Finding:
    """One line of the checklist: the check `kind` of the host."""
    return Finding(kind, level, message, fix, kind)


def _unanswered(facts: HostFacts, kind: str, label: str, fix: str | None = None) -> list[Finding]:
    """The check `kind` failed: what did not answer, and why (its hint, unless `fix`); facts
    never gathered are "not read"."""
    message, hint = facts.errors.get(kind, ("not read", None))
    return [_check(kind, FAIL, f"{label}{message}", fix or hint)]


def _driver_choice(facts: HostFacts, daemon: EngineFacts) -> DriverChoice:
    """The driver device requests name here (DRGPU_DEVICE_DRIVER; auto without settings)."""
    setting = facts.config.device_driver if facts.config else DeviceDriver.AUTO
    return choose(setting, daemon, facts.hook_on_path)


def run_checks(facts: HostFacts) -> list[Finding]:
    """Every check, in the order a person would fix things."""
    return [
        *check_settings(facts),
        *check_nvml(facts),
        *check_docker(facts),
        *check_device_requests(facts),
        *check_device_driver(facts),
        *check_toolkit(facts),
        *check_x_server(facts),
        *check_daemon_reload(facts),
        *check_default_runtime(facts),
        *check_compose(facts),
        *check_image_cuda(facts),
        *check_drfc_swarm(facts),
    ]


def check_drfc_swarm(facts: HostFacts) -> list[Finding]:
    """In DRfC's swarm style: `jq` and the node labels its start script checks."""
    if "drfc-swarm" in facts.errors:
        return _unanswered(facts, "drfc-swarm", "DRfC's swarm: ", "docker swarm init")
    if facts.drfc_swarm is None:
        return []
    if not facts.drfc_swarm:
        return [_check("drfc-swarm", PASS, "DRfC's swarm start: jq and the node labels are there")]
    return [_check("drfc-swarm", FAIL, problem, fix) for problem, fix in facts.drfc_swarm]


def check_settings(facts: HostFacts) -> list[Finding]:
    """The settings file loads and passes drgpu's checks."""
    if facts.config is None:
        return _unanswered(facts, "settings", "")
    return [_check("settings", PASS, f"{facts.env_file}: run {facts.config.run_id}")]


def check_nvml(facts: HostFacts) -> list[Finding]:
    """NVML loads (the driver version and GPU count), every GPU answers, and persistence mode
    keeps the driver loaded between containers."""
    if (inventory := facts.inventory) is None:
        return _unanswered(facts, "nvml", "NVML: ")
    cuda = cuda_text(inventory.cuda_driver_version)
    summary = f"NVML loads: driver {inventory.driver_version or '?'}, CUDA {cuda}"
    if not inventory.gpus:
        fix = "check `nvidia-smi`; a GPU passed to a VM must be bound to the nvidia driver"
        return [_check("nvml", WARN, f"{summary}, but it shows no GPU", fix)]
    found = [_check("nvml", PASS, f"{summary}, {len(inventory.gpus)} GPU(s)")]
    if lost := [gpu for gpu in inventory.gpus if gpu.lost]:
        message = "; ".join(f"GPU {gpu.index} is lost ({gpu.error})" for gpu in lost)
        fix = "look for Xid errors in `dmesg`; a lost GPU needs a reset (nvidia-smi -r) or a reboot"
        found.append(_check("gpus", FAIL, message, fix))
    else:
        found.append(_check("gpus", PASS, "every GPU answers NVML"))
    for health in facts.health:  # as `up` judges them: pending a reset fails, the rest warns
        if wrong := standing(health):
            level = FAIL if pending(health) else WARN
            message = f"GPU {health.index}: {'; '.join(wrong)}"
            fix = "see `nvidia-smi -q -d PERFORMANCE,ECC,PAGE_RETIREMENT,ROW_REMAPPER`"
            fix += "; `up` refuses it until a reset (`sudo nvidia-smi -r -i N`)" * (level == FAIL)
            found.append(_check("gpu-health", level, message, fix))
    if off := [str(index) for index, mode in enumerate(facts.persistence) if mode is False]:
        message = (
            f"persistence mode is off on GPU {', '.join(off)}: every container start"
            " re-initialises the driver (slow, and GPUs may be briefly unavailable)"
        )
        fix = "sudo nvidia-smi -pm 1, or enable the nvidia-persistenced service"
        found.append(_check("persistence", WARN, message, fix))
    elif any(mode is not None for mode in facts.persistence):
        found.append(_check("persistence", PASS, "persistence mode is on"))
    return found


def check_docker(facts: HostFacts) -> list[Finding]:
    """The engine answers, and is new enough for device requests."""
    if (daemon := facts.daemon) is None:
        return _unanswered(facts, "docker", "Docker: ")
    summary = f"Docker engine {daemon.version} (API {daemon.api_version})"
    if (version := parse_version(daemon.version)) and version < DOCKER_MIN:
        summary += ": device requests need >= 19.03"
        return [_check("docker", FAIL, summary, "upgrade Docker")]
    return [_check("docker", PASS, summary)]


def check_device_requests(facts: HostFacts) -> list[Finding]:
    """Whether the engine can give a container NVIDIA GPUs: proven by the probe, else guessed
    from its runtimes, CDI devices and the toolkit's hook."""
    if (daemon := facts.daemon) is None:
        return []
    if facts.probe_image is not None:
        return [_probe_check(facts, facts.probe_image)]
    cdi = nvidia_cdi_devices(daemon)
    signs = [
        sign
        for sign, seen in (
            ("an nvidia runtime", "nvidia" in daemon.runtimes),
            (f"{len(cdi)} NVIDIA CDI device(s)", bool(cdi)),
            (f"{HOOK} on PATH", facts.hook_on_path),
        )
        if seen
    ]
    if signs:
        message = (
            f"the NVIDIA container toolkit is there ({', '.join(signs)});"
            " `drgpu doctor --probe` proves device requests work"
        )
        return [_check("device-requests", PASS, message)]
    message = (
        f"no sign of the NVIDIA container toolkit (no nvidia runtime, no CDI device, no {HOOK}"
        " on PATH): GPU containers may fail with 'could not select device driver'"
    )
    fix = f"run `drgpu doctor --probe` to be sure; else {TOOLKIT_FIX}"
    return [_check("device-requests", WARN, message, fix)]


def check_device_driver(facts: HostFacts) -> list[Finding]:
    """Which driver drgpu's device requests name on this host (DRGPU_DEVICE_DRIVER), and
    why; a warning where that driver cannot serve them."""
    if (daemon := facts.daemon) is None:
        return []
    choice = _driver_choice(facts, daemon)
    summary = f"device requests use driver {choice.driver}: {choice.why}"
    cdi = nvidia_cdi_devices(daemon)
    toolkit = "nvidia" in daemon.runtimes or facts.hook_on_path
    if choice.driver is DeviceDriver.NVIDIA and cdi and not toolkit:
        message = (
            f"{summary}, but only CDI serves NVIDIA GPUs here ({len(cdi)} CDI device(s)):"
            " `driver: nvidia` fails with 'could not select device driver'"
        )
        fix = "set DRGPU_DEVICE_DRIVER=auto (or cdi) in system.env"
        return [_check("device-driver", WARN, message, fix)]
    if choice.driver is DeviceDriver.CDI and not cdi:
        message = (
            f"{summary}, but the engine discovers no NVIDIA CDI device"
            " (Docker before 28.2 does not list them; CDI needs Docker 25+)"
        )
        fix = "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml, then restart dockerd"
        return [_check("device-driver", WARN, message, fix)]
    uuids = [gpu.uuid for gpu in facts.inventory.gpus if gpu.uuid] if facts.inventory else []
    if unnamed := unnamed_in_spec(choice.driver, daemon, uuids):
        return [_check("device-driver", WARN, f"{summary}; but {unnamed}")]
    return [_check("device-driver", PASS, summary)]


def check_toolkit(facts: HostFacts) -> list[Finding]:
    """The toolkit's version and mode; warnings where jit-cdi mode gives a Swarm stack's reserving
    tasks no GPU (1.18.x), or lets a container's EGL/Vulkan reach every GPU."""
    if (toolkit := facts.toolkit) is None:
        return []
    egl = egl_problem(toolkit)
    found = [] if egl is None else [_check("toolkit-egl", WARN, egl)]
    if toolkit.version is None and not toolkit.config_found:
        return found
    summary = f"NVIDIA container toolkit {toolkit.version_text}"
    if toolkit.effective_mode:
        summary += f", runtime mode {toolkit.effective_mode}"
    if (problem := generic_resources_problem(toolkit)) is None:
        check = _check("toolkit", PASS, summary)
    elif not (facts.config and facts.config.deploys_to_swarm()):
        check = _check("toolkit", PASS, f"{summary} (Swarm's generic resources would need a fix)")
    else:
        fix = "drgpu swarm-setup shows the node's setup"
        check = _check("toolkit", WARN, f"Swarm: {problem}", fix)
    return [check, *found]


def check_x_server(facts: HostFacts) -> list[Finding]:
    """With DR_HOST_X: the X server's GPU, which Gazebo renders on, against the simulator's."""
    config, inventory = facts.config, facts.inventory
    if config is None or not config.host_x or inventory is None:
        return []
    request = config.simulator_devices
    if config.index_order == IndexOrder.CUDA and bare_indices(request):
        request = in_cuda_order(request, cuda_order(inventory))[0]
    simulator = [a.gpu for a in resolve(request, inventory)[0]]
    warning = x_server_warning(inventory, simulator)
    if warning is None:
        return [_check("x-server", PASS, f"DR_HOST_X: {x_server_text(inventory)}")]
    fix = (
        "run the X server on the simulator's GPU (BusID in xorg.conf), or give the simulator"
        " the X server's GPU, or DR_HOST_X=False"
    )
    return [_check("x-server", WARN, warning, fix)]


def check_daemon_reload(facts: HostFacts) -> list[Finding]:
    """Under systemd's cgroup driver a `systemctl daemon-reload` takes from running containers
    the NVIDIA device nodes /dev/char does not link (nvidia-container-toolkit#48)."""
    if (daemon := facts.daemon) is None or not facts.device_nodes or not daemon.cgroup_driver:
        return []  # no engine, no NVIDIA device node, or an engine silent on its cgroup driver
    missing = [
        path
        for path, (major, minor) in facts.device_nodes.items()
        if f"{major}:{minor}" not in facts.char_links
    ]
    leaves = "daemon-reload leaves containers their GPUs"
    if daemon.cgroup_driver != "systemd":
        safe = f"Docker's cgroup driver is {daemon.cgroup_driver}: a systemctl {leaves}"
    elif _driver_choice(facts, daemon).driver is DeviceDriver.CDI:
        safe = (
            "cgroup driver systemd; drgpu gives GPUs through CDI, whose device nodes systemd"
            f" knows: a {leaves}"
        )
    elif not missing:
        safe = "cgroup driver systemd, and /dev/char links every NVIDIA device node"
    else:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        message = (
            "Docker's cgroup driver is systemd and /dev/char has no link for"
            f" {', '.join(missing[:3])}{more}: after `systemctl daemon-reload` (a package install"
            " runs one) running containers lose their GPUs ('Failed to initialize NVML: Unknown"
            " Error'), and a training dies"
        )
        fix = (
            "sudo nvidia-ctk system create-dev-char-symlinks --create-all (and its udev rule, to"
            " keep them after a reboot), or give GPUs through CDI (DRGPU_DEVICE_DRIVER=cdi)"
        )
        return [_check("daemon-reload", WARN, message, fix)]
    return [_check("daemon-reload", PASS, safe)]


def _probe_check(facts: HostFacts, image: str) -> Finding:
    if facts.images.get(image) is None:
        message = f"cannot probe: image {image} is not in the engine (drgpu never pulls)"
        fix = f"docker pull {image}, or name a local image with --image"
        return _check("device-requests", WARN, message, fix)
    if (error := facts.probe_error) is None:
        message = f"a container of {image} with an NVIDIA device request started"
        return _check("device-requests", PASS, message)
    if "could not select device driver" in error:
        message = (
            "the engine cannot serve NVIDIA device requests (could not select device driver):"
            " the container toolkit is missing, or dockerd was not restarted after installing it"
        )
        return _check("device-requests", FAIL, message, TOOLKIT_FIX)
    fix = "read the engine's message; `nvidia-container-cli info` shows the toolkit's view"
    if "unsatisfied condition: cuda" in error:
        fix = f"the driver is too old for {image}: upgrade the NVIDIA driver"
    message = f"a container of {image} with an NVIDIA device request failed: {error}"
    return _check("device-requests", FAIL, message, fix)


def check_default_runtime(facts: HostFacts) -> list[Finding]:
    """The nvidia default runtime exposes every GPU to images that ask for all of them."""
    if facts.daemon is None:
        return []
    runtime = facts.daemon.default_runtime or "runc"
    if runtime != "nvidia":
        return [_check("default-runtime", PASS, f"the default runtime is {runtime}")]
    greedy = [
        name
        for name, image in facts.images.items()
        if image and image.environment.get("NVIDIA_VISIBLE_DEVICES") == "all"
    ]
    if not greedy:
        message = "the default runtime is nvidia; no checked image sets NVIDIA_VISIBLE_DEVICES=all"
        return [_check("default-runtime", PASS, message)]
    message = (
        f"the default runtime is nvidia and {', '.join(greedy)} set(s)"
        " NVIDIA_VISIBLE_DEVICES=all: any container of it that drgpu did not start"
        " (SageMaker local mode's trainer too) sees every GPU"
    )
    fix = (
        'remove "default-runtime": "nvidia" from /etc/docker/daemon.json and restart dockerd'
        " (drgpu gives GPUs through device requests)"
    )
    return [_check("default-runtime", WARN, message, fix)]


def check_compose(facts: HostFacts) -> list[Finding]:
    """Compose is there and new enough for drgpu's override file."""
    if (output := facts.compose_version) is None:
        fix = "install the docker compose plugin (>= 2.24.4), or set DRGPU_COMPOSE"
        return _unanswered(facts, "compose", "Docker Compose: ", fix)
    if (version := parse_version(output)) is None:
        shown = output.strip().splitlines()[0] if output.strip() else "?"
        return [_check("compose", WARN, f"cannot read the Compose version from {shown!r}")]
    summary = f"Docker Compose {'.'.join(map(str, version))}"
    if version < COMPOSE_MIN:
        message = f"{summary}: drgpu's override needs >= 2.24.4 (!override and !reset)"
        return [_check("compose", FAIL, message, "upgrade the docker compose plugin")]
    if version < COMPOSE_GPUS_KEY:
        message = f"{summary}: compose files with the `gpus:` key or CDI devices need >= 2.30"
        fix = "upgrade the docker compose plugin if your compose files use them"
        return [_check("compose", WARN, message, fix)]
    return [_check("compose", PASS, summary)]


def check_image_cuda(facts: HostFacts) -> list[Finding]:
    """Each image's CUDA needs (NVIDIA_REQUIRE_CUDA, else CUDA_VERSION) against the driver's."""
    if facts.daemon is None:
        return []
    known = facts.inventory or Inventory(gpus=())  # without NVML: the driver's is unknown
    return [_image_cuda_check(name, image, known) for name, image in facts.images.items()]


def _image_cuda_check(name: str, image: ImageFacts | None, inventory: Inventory) -> Finding:
    line = partial(Finding, name, kind="image-cuda")
    driver_cuda, driver = inventory.cuda_driver_version, inventory.driver_version
    if image is None:
        message = f"image {name} is not in the engine: its CUDA needs are unchecked"
        fix = f"docker pull {name} (drgpu never pulls), then run doctor again"
        return line(WARN, message, fix)
    env = image.environment
    if (needed := required_cuda(env)) is None:
        return line(PASS, f"image {name} states no CUDA requirement")
    if env.get("NVIDIA_DISABLE_REQUIRE", "").lower() in ("1", "true"):
        return line(PASS, f"image {name} disables the toolkit's CUDA check")
    wanted = f"{needed[0]}.{needed[1]}"
    if driver_cuda is None:
        return line(WARN, f"image {name} needs CUDA {wanted}; the driver's is unknown")
    have = (driver_cuda // 1000, driver_cuda % 1000 // 10)
    summary = (
        f"image {name} needs CUDA {wanted}, the driver ({driver or '?'})"
        f" supports CUDA {cuda_text(driver_cuda)}"
    )
    if needed <= have:
        return line(PASS, summary)
    upgrade = f"upgrade the NVIDIA driver to >= {min_driver(needed)}"
    if _compat_clause_met(env.get("NVIDIA_REQUIRE_CUDA", ""), driver):
        message = (
            f"{summary}: only a datacenter GPU with the CUDA forward-compatibility package runs it"
        )
        return line(WARN, message, upgrade)
    message = f"{summary}: its containers will not start (or CUDA fails inside them)"
    fix = f"{upgrade}, or use an image built for CUDA <= {cuda_text(driver_cuda)}"
    return line(FAIL, message, fix)


def parse_version(text: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of the first version in `text`: `v2.29.1`, `20.10.24+dfsg1`."""
    match = _VERSION.search(text)
    return None if match is None else (int(match[1]), int(match[2]), int(match[3] or 0))


def cuda_text(version: int | None) -> str:
    """NVML's CUDA driver version (12040) as people write it (12.4)."""
    from drgpu.probe import format_cuda_version  # lazy: the probe's one rule, not at start-up

    return format_cuda_version(version) or "?"


def _conditions(requirement: str, key: str) -> list[list[re.Match[str]]]:
    """NVIDIA_REQUIRE_CUDA's clauses (space-separated, ORed: `brand=tesla,driver>=470,driver<471`),
    each as its conditions on `key`."""
    matches = [
        [_CONDITION.match(part.strip()) for part in c.split(",")] for c in requirement.split()
    ]
    return [[m for m in clause if m and m["key"] == key] for clause in matches]


def required_cuda(environment: Mapping[str, str]) -> tuple[int, int] | None:
    """The CUDA major.minor an image needs: `cuda>=X.Y` of NVIDIA_REQUIRE_CUDA, else the
    major.minor of CUDA_VERSION; None when it states neither."""
    for clause in _conditions(environment.get("NVIDIA_REQUIRE_CUDA", ""), "cuda"):
        for match in clause:
            if match["op"] in (">=", ">", "=", "==") and (version := parse_version(match["value"])):
                return version[:2]
    version = parse_version(environment.get("CUDA_VERSION", ""))
    return version[:2] if version else None


def _compat_clause_met(requirement: str, driver: str | None) -> bool:
    """Whether another clause of NVIDIA_REQUIRE_CUDA holds for this driver, brand aside."""
    version = parse_version(driver or "")
    return version is not None and any(
        drivers and all(_holds(version, c["op"], c["value"]) for c in drivers)
        for drivers in _conditions(requirement, "driver")
    )


def _holds(version: tuple[int, int, int], op: str, value: str) -> bool:
    bound = parse_version(value if "." in value else f"{value}.0")
    return bound is not None and _COMPARE[op](version[:2], bound[:2])


def min_driver(cuda: tuple[int, int]) -> str:
    """The first driver of a CUDA release (or of the next known one)."""
    known = (driver for release, driver in sorted(DRIVER_FOR_CUDA.items()) if release >= cuda)
    return next(known, f"the first driver of CUDA {cuda[0]}.{cuda[1]}")


def resolved_images(services: Mapping[str, Any]) -> tuple[tuple[str, ...], str | None]:
    """The images of a stack as Compose resolved it (`compose config`'s services), and the
    one `doctor --probe` starts: the first simulator's, else the trainer's, else the first."""
    images = {
        name: str(body["image"])
        for name, body in services.items()
        if isinstance(body, Mapping) and body.get("image")
    }
    probed = min(images, key=lambda name: _PROBE_PREFERENCE.get(role_of(name), 9), default=None)
    return tuple(dict.fromkeys(images.values())), images[probed] if probed else None


def stack_images(values: Mapping[str, str]) -> tuple[str, str]:
    """The trainer and simulator images of drgpu's base stack, as its compose file names them."""
    value = {key: values.get(key) or default for key, default in DEFAULTS.items()}
    trainer = value["DRGPU_SAGEMAKER_IMAGE"] or (
        f"awsdeepracercommunity/deepracer-sagemaker:{value['DR_SAGEMAKER_IMAGE']}"
    )
    simulator = f"{value['DR_SIMAPP_SOURCE']}:{value['DR_SIMAPP_VERSION']}"
    return trainer, value["DRGPU_ROBOMAKER_IMAGE"] or simulator


_PROBE_PREFERENCE = {Role.SIMULATOR: 0, Role.TRAINER: 1, Role.TRAINER_LAUNCHER: 2}
