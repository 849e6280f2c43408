"""What a command acts on: the settings files, the compose files and, in an activated
DeepRacer-for-cloud shell, its checkout. Flags win; then the activated shell; then
`system.env` here and drgpu's own base stack. Pure: the environment is a mapping given.

`source bin/activate.sh [run.env]` exports `DR_DIR` (the checkout), `DR_CONFIG` (the
run.env in use), `DR_TRAIN_COMPOSE_FILE` and `DR_EVAL_COMPOSE_FILE` (file lists written
`-f a.yml -f b.yml`, or `-c a.yml -c b.yml` for swarm, the flag in `DR_DOCKER_FILE_SEP`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from drgpu.core.numbers import whole_number
from drgpu.errors import ConfigError

DEFAULT_ENV_FILE = Path("system.env")
FILE_FLAGS = ("-f", "-c", "--file", "--compose-file")
TRAIN_FILES = "DR_TRAIN_COMPOSE_FILE"
EVAL_FILES = "DR_EVAL_COMPOSE_FILE"
STATE_DIR = ".drgpu"  # drgpu's own folder beside the settings file (host.state_files)


@dataclass(frozen=True)
class InputOptions:
    """--env-file, --run-env, -f and --eval as given (None: not given); `needs_files`: the
    command reads compose files (in a DRfC shell without a compose-file list, an error)."""

    env_file: Path | None = None
    run_env: Path | None = None
    compose_files: tuple[Path, ...] | None = None
    evaluation: bool = False
    needs_files: bool = True


@dataclass(frozen=True)
class Inputs:
    """The files one command reads, and where they came from."""

    env_file: Path
    run_env: Path | None = None  # None: run.env beside env_file, when present
    compose_files: tuple[Path, ...] | None = None  # None: drgpu's own base stack
    evaluation: bool = False
    checkout: DrfcCheckout | None = None  # an activated DRfC shell, flags or not
    drfc_settings: bool = False  # the settings are the activated checkout's


def resolve_inputs(options: InputOptions, environ: Mapping[str, str]) -> Inputs:
    """The target of a command: in an activated DRfC shell its system.env, `$DR_CONFIG` and
    compose-file list, unless a flag names its own."""
    env_file, run_env, evaluation = options.env_file, options.run_env, options.evaluation
    for flag, named in (("--env-file", env_file), ("--run-env", run_env)):
        if named is not None and not named.name:  # '' (typer's '.'), '/', '.': no file
            raise ConfigError(f"{flag} names no file: give the path of a settings file")
    checkout = drfc_checkout(environ, evaluation=evaluation)
    files = options.compose_files or None
    if files is None and checkout is not None:
        if not checkout.compose_files and options.needs_files:
            raise ConfigError(
                f"DR_DIR is set ({checkout.root}) but {checkout.compose_variable} is not",
                hint=f"source {checkout.root}/bin/activate.sh, or pass -f FILE",
            )
        files = checkout.compose_files or None
    if checkout is None or env_file is not None:
        return Inputs(env_file or DEFAULT_ENV_FILE, run_env, files, evaluation, checkout)
    system_env, drfc_run_env = checkout.root / DEFAULT_ENV_FILE, run_env or checkout.run_env
    return Inputs(system_env, drfc_run_env, files, evaluation, checkout, run_env is None)


@dataclass(frozen=True)
class DrfcCheckout:
    """An activated DeepRacer-for-cloud shell: where its files are."""

    root: Path  # $DR_DIR
    run_env: Path | None  # $DR_CONFIG (None when unset)
    evaluation: bool  # --eval
    compose_files: tuple[Path, ...]  # DR_TRAIN_COMPOSE_FILE, or DR_EVAL_COMPOSE_FILE with --eval
    file_flag: str  # "-f" or "-c", as the variable writes them

    @property
    def start_script(self) -> Path:
        """DRfC's own start script of this kind of run."""
        return self.stop_script.with_name("start.sh")

    @property
    def stop_script(self) -> Path:
        """DRfC's own stop script of this kind of run."""
        return self.root / "scripts" / ("evaluation" if self.evaluation else "training") / "stop.sh"

    @property
    def compose_variable(self) -> str:
        """The variable the compose files come from."""
        return EVAL_FILES if self.evaluation else TRAIN_FILES


def drfc_checkout(environ: Mapping[str, str], *, evaluation: bool) -> DrfcCheckout | None:
    """The activated checkout `environ` describes, or None outside DRfC (no `DR_DIR`). Its
    compose files are the user's: drgpu's own override, which `eval "$(drgpu drfc-env)"`
    added to the list, is left out (drgpu adds the one it writes anew)."""
    if not (root := environ.get("DR_DIR", "").strip()):
        return None
    variable = EVAL_FILES if evaluation else TRAIN_FILES
    listed, flag = split_file_list(environ.get(variable, ""), variable)
    files = tuple(path for path in listed if path.parent.name != STATE_DIR)
    config = environ.get("DR_CONFIG", "").strip()
    separator = environ.get("DR_DOCKER_FILE_SEP", "").strip()
    flag = flag or (separator if separator in ("-f", "-c") else "-f")
    return DrfcCheckout(Path(root), Path(config) if config else None, evaluation, files, flag)


def split_file_list(text: str, variable: str) -> tuple[tuple[Path, ...], str | None]:
    """The files of a DRfC compose-file list (`-f a.yml -f b.yml`, or with `-c`) and the
    flag it writes; `ConfigError` for a list that is not one."""
    words = text.split()
    flags, files = words[::2], words[1::2]
    if len(flags) != len(files) or not set(flags) <= set(FILE_FLAGS):
        raise ConfigError(
            f"{variable} is not a list of compose files ({text.strip()!r}):"
            " expected -f FILE (or -c FILE) pairs",
            hint="source DRfC's bin/activate.sh again",
        )
    flag = ("-c" if flags[0] in ("-c", "--compose-file") else "-f") if flags else None
    return tuple(map(Path, files)), flag


def activation_exports(values: Mapping[str, str]) -> dict[str, str]:
    """What DRfC's `dr-update-env` (and `dr-start-training`) derives from the files:
    `DR_RUN_ID`'s default, the ports of the run, and `AWS_DEFAULT_REGION`."""
    run_id = values.get("DR_RUN_ID", "") or "0"
    derived = {"DR_RUN_ID": run_id, "AWS_DEFAULT_REGION": values.get("DR_AWS_APP_REGION", "")}
    swarm = values.get("DR_DOCKER_STYLE", "").lower() == "swarm"
    number = whole_number(run_id, 0, 999_999_999)
    ports = (("TRAIN", 8080, "8080-8089"), ("EVAL", 8180, "8080-8089"), ("GUI", 5900, "5901-5920"))
    for key, base, compose_range in ports:  # swarm: base + the run's id; Compose: a range
        port = ("" if number is None else str(base + number)) if swarm else compose_range
        derived[f"DR_ROBOMAKER_{key}_PORT"] = port
    return derived
