"""What a command acts on: the settings files, the compose files and, in an activated
DeepRacer-for-cloud shell, its checkout. Resolved in one place for every command.

Explicit flags win; then the activated shell (`drgpu.core.drfc`); then drgpu's defaults
(`system.env` in the current directory, drgpu's own base stack).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from drgpu.core.drfc import DrfcCheckout, drfc_checkout
from drgpu.errors import ConfigError

DEFAULT_ENV_FILE = Path("system.env")


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
    """The target of a command from its flags and the environment: in an activated DRfC
    shell its system.env, `$DR_CONFIG` and compose-file list, unless a flag names its own."""
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
