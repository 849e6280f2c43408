"""system.env (and run.env on top), evaluated as DRfC's activation does (`core.envfile`).
DRfC's `DR_*` keys work unchanged; drgpu's own start with `DRGPU_`. Every key drgpu reads
is declared once, in `SETTINGS`."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from drgpu.core.devices import NO_GPU, DeviceRequest, DeviceSyntaxError, parse_devices
from drgpu.core.envfile import ENVIRONMENT, Origin, read_env_texts
from drgpu.core.inputs import activation_exports
from drgpu.core.modes import (
    DeviceDriver,
    DockerStyle,
    IndexOrder,
    Sharing,
    StrEnum,
    WorkerPlacement,
    choices,
    member,
)
from drgpu.core.numbers import whole_number
from drgpu.core.redaction import redact, secret_values
from drgpu.errors import ConfigError

TRAINER_DEVICES_KEY = "DR_SAGEMAKER_CUDA_DEVICES"
SIMULATOR_DEVICES_KEY = "DR_ROBOMAKER_CUDA_DEVICES"
TRAINER_ALIAS_KEY = "DRGPU_TRAINER_DEVICES"
SIMULATOR_ALIAS_KEY = "DRGPU_SIMULATOR_DEVICES"
DEFAULT_MPS_IMAGE = "nvidia/cuda:12.4.1-base-ubuntu22.04"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_RUN_ID = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
EVALUATION_PREFIX = "eval-"
# The bounds of what a user writes: each message names its bound.
MAX_RUN_ID_LENGTH = 64  # deepracer-eval-<id>.override.yml stays a short file name
MAX_WORKERS = 64
MAX_MPS_MEMORY_MIB = 1024 * 1024  # 1 TiB, more than any GPU has


def _run_id(text: str) -> str:
    """DR_RUN_ID checked: spelling, length, and not `eval-N` (`run_key` of run N's evaluation)."""
    if not _RUN_ID.match(text):
        raise ConfigError(f"{_shown(text)} must be lowercase letters, digits, '-' or '_'")
    if len(text) > MAX_RUN_ID_LENGTH:
        raise ConfigError(f"is {len(text)} characters long, more than {MAX_RUN_ID_LENGTH}")
    if text.startswith(EVALUATION_PREFIX):
        raise ConfigError(
            f"{_shown(text)} starts with {EVALUATION_PREFIX!r}, which names the evaluation"
            f" of run {_shown(text.removeprefix(EVALUATION_PREFIX))} in drgpu's labels",
            hint="choose a run id that does not start with 'eval-'",
        )
    return text


def _workers(text: str) -> int:
    if (workers := whole_number(text, 1, MAX_WORKERS)) is None:
        raise ConfigError(f"{_shown(text)} is not a whole number from 1 to {MAX_WORKERS}")
    return workers


def _flag(text: str) -> bool:
    if text.lower() not in _TRUE + _FALSE:
        raise ConfigError(f"{text.lower()!r} is not true or false")
    return text.lower() in _TRUE


def _one_of(mode: type[StrEnum]) -> Callable[[str], StrEnum]:
    """The parser of a setting that names one member of `mode`, in any case."""

    def parse(text: str) -> StrEnum:
        if (found := member(mode, text.lower())) is None:
            raise ConfigError(f"{text.lower()!r} is not one of {choices(mode)}")
        return found

    return parse


def _percentage(text: str) -> int | None:
    if not (number := text.rstrip("%").strip()):
        return None
    if (percent := whole_number(number, 1, 100)) is None:
        raise ConfigError(f"{_shown(text)} is not a whole percentage from 1 to 100")
    return percent


def _memory(text: str) -> int | None:
    """An MPS memory limit (2G, 2048M) in MiB; None where none is written."""
    if not text:
        return None
    match = re.match(r"^(?P<amount>[0-9]+)\s*(?P<unit>[MG])(?:I?B)?$", text, re.IGNORECASE)
    unit = 1024 if match and match["unit"].upper() == "G" else 1
    amount = whole_number(match["amount"], 1, MAX_MPS_MEMORY_MIB // unit) if match else None
    if amount is None:
        raise ConfigError(
            f"{_shown(text)} is not a memory size like 2G or 2048M"
            f" (from 1M to {MAX_MPS_MEMORY_MIB // 1024}G)",
            hint="MPS counts M and G",
        )
    return amount * unit


@dataclass(frozen=True)
class Setting:
    """One key drgpu reads: its default ("": nothing), help, and parser into the `Config`
    field of its name less `DR_`/`DRGPU_` (None: read where it is used)."""

    key: str
    default: str
    help: str
    parse: Callable[[str], Any] | None = None


# Every key drgpu reads, declared once: the reader, the key-mistake checks,
# system.env.example and docs/settings.md follow it (tests/unit/core/test_settings.py).
SETTINGS = (
    Setting(TRAINER_DEVICES_KEY, "", "the trainer's GPUs (unset: `auto`, with a warning)"),
    Setting(SIMULATOR_DEVICES_KEY, "", "the simulators' GPUs (empty or `none`: the CPU)"),
    Setting("DR_WORKERS", "1", f"simulator workers, 1 to {MAX_WORKERS}", _workers),
    Setting("DR_RUN_ID", "0", "the run; its project is `deepracer-<id>`", _run_id),
    Setting("DR_SAGEMAKER_IMAGE", "5.3.0-gpu", "the trainer's image tag (drgpu's base stack)"),
    Setting("DR_SIMAPP_SOURCE", "awsdeepracercommunity/deepracer-simapp", "the simulator image"),
    Setting("DR_SIMAPP_VERSION", "5.3.3-gpu", "the simulator's image tag (drgpu's base stack)"),
    Setting("DR_HOST_X", "false", "the simulator uses the host's X server", _flag),
    Setting("DR_DOCKER_STYLE", "compose", "how the stack runs", _one_of(DockerStyle)),
    Setting("DRGPU_SHARING", "exclusive", "how services may share a GPU", _one_of(Sharing)),
    Setting("DRGPU_WORKER_PLACEMENT", "spread", "how workers get GPUs", _one_of(WorkerPlacement)),
    Setting("DRGPU_MPS_IMAGE", DEFAULT_MPS_IMAGE, "MPS: the control daemon's image", str),
    Setting("DRGPU_MPS_SAGEMAKER_THREADS", "", "MPS: the trainer's % of SMs", _percentage),
    Setting("DRGPU_MPS_ROBOMAKER_THREADS", "", "MPS: each worker's % of SMs", _percentage),
    Setting("DRGPU_MPS_SAGEMAKER_MEMORY", "", "MPS: the trainer's memory per GPU", _memory),
    Setting("DRGPU_MPS_ROBOMAKER_MEMORY", "", "MPS: each worker's memory per GPU", _memory),
    Setting("DRGPU_LOCK_TIMEOUT", "900", "seconds `up` and `down` wait for the engine lock"),
    Setting("DRGPU_LOCK_FILE", "", "no longer used: drgpu locks the Docker engine itself"),
    Setting("DRGPU_INDEX_ORDER", "pci", "what a bare GPU index means", _one_of(IndexOrder)),
    Setting("DRGPU_SWARM_GPUS", "auto", "Swarm: how GPU tasks get GPUs: `auto`, `pin`, `generic`"),
    Setting("DRGPU_DEVICE_DRIVER", "auto", "how requests name GPUs", _one_of(DeviceDriver)),
    Setting("DRGPU_COMPOSE", "", "the Compose command (unset: the plugin, else docker-compose)"),
    Setting("DRGPU_SAGEMAKER_IMAGE", "", "the trainer's full image name (drgpu's base stack)"),
    Setting("DRGPU_ROBOMAKER_IMAGE", "", "the simulator's full image name (drgpu's base stack)"),
    Setting(TRAINER_ALIAS_KEY, "", f"an alias of {TRAINER_DEVICES_KEY}"),
    Setting(SIMULATOR_ALIAS_KEY, "", f"an alias of {SIMULATOR_DEVICES_KEY}"),
)
KEYS = tuple(setting.key for setting in SETTINGS)
DEFAULTS = {setting.key: setting.default for setting in SETTINGS}
DRGPU_KEYS = tuple(setting.key for setting in SETTINGS if setting.key.startswith("DRGPU_"))
MPS_KEYS = tuple(key for key in DRGPU_KEYS if key.startswith("DRGPU_MPS_"))


def project_name(run_id: str, *, evaluation: bool) -> str:
    """The compose project name of a run (or its evaluation), as DRfC names it."""
    return f"deepracer-eval-{run_id}" if evaluation else f"deepracer-{run_id}"


def training_run(project: str) -> str | None:
    """The run id in a training's project name (`project_name`'s inverse), else None."""
    if project.startswith("deepracer-eval-") or not project.startswith("deepracer-"):
        return None
    return project.removeprefix("deepracer-")


def run_key(run_id: str, *, evaluation: bool) -> str:
    """A run as drgpu's labels name it: its evaluation is `eval-<id>`."""
    return f"{EVALUATION_PREFIX}{run_id}" if evaluation else run_id


@dataclass(frozen=True)
class Config:
    """The settings of one stack, parsed and checked (`config_from_values` makes it)."""

    values: Mapping[str, str]
    origins: Mapping[str, Origin]
    secrets: tuple[str, ...]  # the values never printed, also those a later line replaced
    run_id: str
    workers: int
    host_x: bool
    docker_style: DockerStyle
    sharing: Sharing
    trainer_devices: DeviceRequest
    simulator_devices: DeviceRequest
    worker_placement: WorkerPlacement
    mps_image: str
    mps_sagemaker_threads: int | None  # MPS: each role's limits; None: none set
    mps_robomaker_threads: int | None
    mps_sagemaker_memory: int | None  # MiB
    mps_robomaker_memory: int | None
    index_order: IndexOrder
    evaluation: bool
    warnings: tuple[str, ...]
    trainer_key: str
    simulator_key: str
    service_devices: tuple[ServiceDevices, ...]
    device_driver: DeviceDriver
    key_mistakes: tuple[str, ...]
    trainer_defaulted: bool
    index_order_chosen: bool

    @property
    def project(self) -> str:
        """The compose project name (see `project_name`)."""
        return project_name(self.run_id, evaluation=self.evaluation)

    @property
    def run_key(self) -> str:
        """The run as drgpu's labels name it (see `run_key`)."""
        return run_key(self.run_id, evaluation=self.evaluation)

    @property
    def simulators(self) -> int:
        """How many simulators run: DR_WORKERS, but one for an evaluation (as DRfC's)."""
        return 1 if self.evaluation else self.workers

    def where(self, key: str) -> str:
        """`KEY (file:line)` for messages, or just `KEY` when it was not written."""
        origin = self.origins.get(key)
        return f"{key} ({origin})" if origin else key

    def deploys_to_swarm(self, swarm_flag: bool = False) -> bool:
        """Whether the stack goes to Docker Swarm: DR_DOCKER_STYLE=swarm, or `--swarm`."""
        return swarm_flag or self.docker_style == DockerStyle.SWARM

    def refuse_key_mistakes(self) -> None:
        """A `ConfigError` for the first key that looks like a GPU key but is none."""
        if self.key_mistakes:
            raise ConfigError(
                self.key_mistakes[0],
                hint="fix the key (`drgpu plan` lists every such key); see system.env.example",
            )

    @property
    def wants_gpu(self) -> bool:
        """Whether any service asks for a GPU (an unset trainer key: only where NVML answers)."""
        return (
            (self.trainer_devices.wants_gpu and not self.trainer_defaulted)
            or self.simulator_devices.wants_gpu
            or any(own.request.wants_gpu for own in self.service_devices)
        )


def settings_files(
    env_file: Path, run_env: Path | None, existing: Collection[Path], *, drfc: bool = False
) -> tuple[tuple[Path, ...], tuple[str, ...]]:
    """The files to read (`env_file`, then `run_env`, default the run.env beside it, when
    in `existing`) and what choosing them warns of. A missing one is a `ConfigError`, or
    with `drfc` (an activated shell, whose scripts read system.env alone then) a warning."""
    if env_file not in existing:
        raise ConfigError(
            f"no settings file at {env_file}",
            hint="copy system.env.example to system.env, or pass --env-file",
        )
    named = run_env or env_file.with_name("run.env")
    if named in existing:
        return (env_file, named), ()
    if run_env is not None and not drfc:
        raise ConfigError(f"no run settings file at {run_env}")
    if not drfc:
        return (env_file,), ()
    why = (
        f"no run settings file at {run_env} (DR_CONFIG)"
        if run_env
        else f"no run.env at {named} (DR_CONFIG is not set)"
    )
    return (env_file,), (f"{why}: read {env_file} alone",)


def config_from_texts(
    texts: Sequence[tuple[Path, str]],
    environ: Mapping[str, str],
    *,
    evaluation: bool = False,
    drfc: bool = False,
    warnings: Sequence[str] = (),
) -> Config:
    """The settings of files' `texts` (path, text), evaluated as DRfC's activation does
    (docs/settings.md) against `environ` (never changed); `warnings` come first. With
    `drfc` (an activated shell) its `DR_*` keys count where the files set none."""
    values, read_origins, read_warnings, held = read_env_texts(list(texts), environ)
    if "DRGPU_INDEX_ORDER" not in values and environ.get("DRGPU_INDEX_ORDER"):
        values["DRGPU_INDEX_ORDER"] = environ["DRGPU_INDEX_ORDER"]  # may be set in the shell
    inherited = [k for k in environ if drfc and k.startswith("DR_") and k not in values]
    values = {**{k: environ[k] for k in inherited}, **values}
    if drfc:
        values.update(activation_exports(values))
    origins = {**dict.fromkeys(inherited, ENVIRONMENT), **read_origins}
    warned = (*warnings, *read_warnings)
    return config_from_values(
        values, origins, evaluation=evaluation, warnings=warned, held_secrets=held
    )


def config_from_values(
    values: Mapping[str, str],
    origins: Mapping[str, Origin],
    *,
    evaluation: bool = False,
    warnings: tuple[str, ...] = (),
    held_secrets: tuple[str, ...] = (),
) -> Config:
    """Check and parse settings by `SETTINGS`: the first problem is a `ConfigError` naming its
    line. `held_secrets`: secret values a later line replaced."""
    secrets = tuple(sorted({*secret_values(values), *held_secrets}, key=len, reverse=True))

    def fail(key: str, message: str, hint: str | None = None) -> ConfigError:
        where = f"{origins[key]}: " if key in origins else ""
        return ConfigError(redact(f"{where}{key}: {message}", secrets), hint=hint)

    for key, value in values.items():
        if "\x00" in key or "\x00" in value:
            raise fail(key, "holds a NUL byte, which no program can be given")
        if key.startswith("DRGPU_") and key not in DRGPU_KEYS and not is_service_key(key):
            close = difflib.get_close_matches(key, DRGPU_KEYS, n=1, cutoff=0.6)
            suggestion = f"; did you mean {close[0]}?" if close else ""
            raise fail(key, f"unknown drgpu setting{suggestion}", "see system.env.example")
    parsed: dict[str, Any] = {}
    for setting in SETTINGS:
        try:
            if setting.parse is not None:
                field = setting.key.lower().removeprefix("drgpu_").removeprefix("dr_")
                text = values.get(setting.key, "").strip() or setting.default
                parsed[field] = setting.parse(text)
        except ConfigError as exc:
            raise fail(setting.key, exc.message, exc.hint) from None

    def devices(key: str) -> DeviceRequest:
        try:
            return parse_devices(values[key]) if key in values else NO_GPU
        except DeviceSyntaxError as exc:
            raise fail(key, str(exc)) from None

    def role_key(key: str, alias: str) -> str:
        """The role's key that holds its devices: the alias where written (as the same GPUs)."""
        if alias in values and key in values:
            try:
                same = parse_devices(values[key]) == parse_devices(values[alias])
            except DeviceSyntaxError:
                same = values[key].strip() == values[alias].strip()
            if not same:
                raise fail(
                    alias,
                    f"{values[alias].strip()!r} differs from {key}={values[key].strip()!r}:"
                    " they name the same role's GPUs; keep one of them",
                )
        return alias if alias in values else key

    trainer_key = role_key(TRAINER_DEVICES_KEY, TRAINER_ALIAS_KEY)
    simulator_key = role_key(SIMULATOR_DEVICES_KEY, SIMULATOR_ALIAS_KEY)
    return Config(
        values=MappingProxyType(dict(values)),
        origins=MappingProxyType(dict(origins)),
        secrets=secrets,
        **parsed,
        trainer_devices=devices(trainer_key) if trainer_key in values else DeviceRequest(auto=True),
        simulator_devices=devices(simulator_key),
        index_order_chosen=bool(values.get("DRGPU_INDEX_ORDER", "").strip()),
        evaluation=evaluation,
        trainer_key=trainer_key,
        simulator_key=simulator_key,
        service_devices=tuple(
            ServiceDevices(key, devices(key)) for key in values if is_service_key(key)
        ),
        key_mistakes=gpu_key_mistakes(values, origins),
        trainer_defaulted=trainer_key not in values,
        warnings=warnings,
    )


# Keys that look like GPU keys but are none (issue 20): a typo would plan on the CPU unsaid.
GPU_KEYS = (TRAINER_DEVICES_KEY, SIMULATOR_DEVICES_KEY, TRAINER_ALIAS_KEY, SIMULATOR_ALIAS_KEY)
CONTAINER_GPU_KEYS = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")


def gpu_key_mistakes(values: Mapping[str, str], origins: Mapping[str, Origin]) -> tuple[str, ...]:
    """A line for each key of the files that looks like a GPU key but is none, naming the
    key meant, or the keys to use instead."""
    found = []
    for key in values:
        origin = origins.get(key)
        if origin == ENVIRONMENT or key in KEYS or is_service_key(key):
            continue  # the shell's environment is its own: only what the files say counts
        where = f"{origin}: {key}" if origin else key
        if key.upper() in CONTAINER_GPU_KEYS:
            found.append(
                f"{where} is not read from the settings: drgpu sets it in each container;"
                f" write {TRAINER_DEVICES_KEY} (the trainer) and {SIMULATOR_DEVICES_KEY}"
                " (the simulators) instead"
            )
        elif (meant := meant_gpu_key(key)) is not None:
            found.append(
                f"{where} is not a GPU key drgpu or DeepRacer-for-cloud reads;"
                f" did you mean {meant}?"
            )
    return tuple(found)


def meant_gpu_key(key: str) -> str | None:
    """The GPU key `key` is probably a mistake for, if any."""
    upper = key.upper()
    if upper in GPU_KEYS or (upper != key and is_service_key(upper)):
        return upper
    if not upper.startswith("DR"):
        return None
    if close := difflib.get_close_matches(upper, GPU_KEYS, n=1, cutoff=0.85):
        return close[0]
    if not any(word in upper.removeprefix("DRGPU_") for word in ("CUDA", "GPU", "DEVICE")):
        return None
    if "SAGEMAKER" in upper or "TRAINER" in upper:
        return TRAINER_DEVICES_KEY
    if "ROBOMAKER" in upper or "SIMULATOR" in upper:
        return SIMULATOR_DEVICES_KEY
    close = difflib.get_close_matches(upper, GPU_KEYS, n=1, cutoff=0.6)
    return close[0] if close else None


# DRGPU_DEVICES_<SERVICE> gives any other service of the stack GPUs of its own (issue 15).
SERVICE_DEVICES_PREFIX = "DRGPU_DEVICES_"
_SERVICE_KEY = re.compile(rf"^{SERVICE_DEVICES_PREFIX}[A-Z0-9_]+$")


@dataclass(frozen=True)
class ServiceDevices:
    """The GPUs one `DRGPU_DEVICES_<SERVICE>` key asks for."""

    key: str
    request: DeviceRequest


def is_service_key(key: str) -> bool:
    """Whether `key` asks for one service's GPUs (DRGPU_DEVICES_<SERVICE>)."""
    return bool(_SERVICE_KEY.match(key))


def service_devices_key(service: str) -> str:
    """The key that holds a service's GPUs: its name upper-cased, `-` and `.` as `_`."""
    return SERVICE_DEVICES_PREFIX + re.sub(r"[^A-Z0-9_]", "_", service.upper())


def _shown(text: str, limit: int = 40) -> str:
    """`text` quoted for a one-line message, cut short when long."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"
