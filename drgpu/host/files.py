"""The files drgpu reads (settings, compose and inventory files, and its own packaged base
stack and override header) and the environment: read here, handed to the pure core as
texts and mappings. A file that cannot be read is a `ConfigError` naming it."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from drgpu.core.compose_stack import ComposeText, Stack, stack_from_texts
from drgpu.core.inputs import Inputs
from drgpu.core.model import Inventory
from drgpu.core.settings import Config, config_from_texts, run_env_beside, settings_files
from drgpu.core.topology import inventory_from_text
from drgpu.errors import ConfigError

BASE_STACK_NAME = "docker-compose.yml"
OVERRIDE_HEADER_NAME = "override-header.txt"


def load_target_config(target: Inputs, environ: Mapping[str, str] | None = None) -> Config:
    """The settings of a resolved target (`drgpu.core.inputs`)."""
    return load_config(
        target.env_file,
        target.run_env,
        environ=environ,
        evaluation=target.evaluation,
        drfc=target.drfc_settings,
    )


def load_config(
    env_file: Path,
    run_env: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    evaluation: bool = False,
    drfc: bool = False,
) -> Config:
    """Read `env_file`, then `run_env` (default: a `run.env` beside it, when present), and
    evaluate them against `environ` (default: this process's environment, never changed)
    as `drgpu.core.settings.config_from_texts` says."""
    run_settings = run_env_beside(env_file) if run_env is None else run_env
    existing = {path for path in (env_file, run_settings) if is_file(path)}
    chosen = settings_files(env_file, run_env, existing, drfc=drfc)
    return config_from_texts(
        [(path, _settings_text(path)) for path in chosen.paths],
        shell_environment() if environ is None else environ,
        evaluation=evaluation,
        drfc=drfc,
        warnings=chosen.warnings,
    )


def shell_environment() -> dict[str, str]:
    """This process's environment and the variables bash sets itself whose values are
    certain here (UID, EUID, HOSTNAME), as DRfC's activation (a bash) sees them."""
    import socket  # lazy: only where settings are read

    return {
        **os.environ,
        "UID": str(os.getuid()),
        "EUID": str(os.geteuid()),
        "HOSTNAME": socket.gethostname(),
    }


def is_file(path: Path) -> bool:
    """Whether `path` is a file; a name the system refuses (too long) is a `ConfigError`."""
    try:
        return path.is_file()
    except OSError as exc:
        raise ConfigError(f"cannot read {str(path)[:80]!r}: {exc.strerror or exc}") from None


def _settings_text(path: Path) -> str:
    try:
        # Its bytes as written: a CR stays (read_text would turn it into a newline).
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None


def load_stack(files: Sequence[Path]) -> Stack:
    """The stack of compose files. Each is read when the core comes to it, so the first
    problem in file order is the one reported."""
    return stack_from_texts(_compose_texts(files))


def _compose_texts(files: Sequence[Path]) -> Iterator[ComposeText]:
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read compose file {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: not UTF-8 text") from None
        yield ComposeText(path=path, resolved=path.resolve(), text=text)


def load_inventory(path: Path) -> Inventory:
    """Read an inventory file (a topology JSON document, `drgpu.core.topology`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read inventory {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    return inventory_from_text(text, source=str(path))


def base_stack_file() -> Path:
    """drgpu's own base stack: `compose/docker-compose.yml` (installed or in the source tree)."""
    found = _packaged("compose", BASE_STACK_NAME)
    if found is None:
        raise ConfigError("drgpu's base stack is missing from this installation", hint="reinstall")
    return found


def override_header_template() -> str | None:
    """The header template of the compose override (`templates/override-header.txt`);
    None where this installation lacks it."""
    found = _packaged("templates", OVERRIDE_HEADER_NAME)
    return None if found is None else found.read_text(encoding="utf-8")


def _packaged(folder: str, name: str) -> Path | None:
    """A data file of drgpu's own: installed (`drgpu/_data/<folder>`) or in the source tree."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_data" / folder, package.parent / folder):
        if (candidate / name).is_file():
            return candidate / name
    return None
