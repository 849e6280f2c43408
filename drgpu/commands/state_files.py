"""drgpu's own files: the `.drgpu` folder beside the settings file, and files written
there (or by `render -o`) atomically, never over a file drgpu did not write."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from drgpu.errors import ConfigError
from drgpu.targets.compose_override import HEADER_MARK

STATE_DIR = ".drgpu"


def override_path(env_file: Path, project: str) -> Path:
    """drgpu's own override file, in a `.drgpu` folder beside the settings file."""
    return env_file.resolve().parent / STATE_DIR / f"{project}.override.yml"


def state_dir(env_file: Path, *, create: bool = True) -> Path:
    """The `.drgpu` folder beside the settings file (created when missing and `create`);
    never followed when it is a symbolic link, never used when it is not a folder."""
    return _checked_state_dir(env_file.resolve().parent / STATE_DIR, create=create)


def new_state_dir(env_file: Path) -> Path | None:
    """`state_dir`, created; the folder when this call made it, else None."""
    there = state_dir(env_file, create=False).exists()
    folder = state_dir(env_file)
    return None if there else folder


def _checked_state_dir(folder: Path, *, create: bool = True) -> Path:
    try:
        found = folder.lstat()
    except FileNotFoundError:
        if not create:
            return folder
        try:
            folder.mkdir(mode=0o755)
        except FileExistsError:
            return _checked_state_dir(folder)
        except OSError as exc:
            raise ConfigError(
                f"cannot create {folder}: {exc.strerror or exc}",
                hint="drgpu keeps its override beside the settings file: make that folder writable",
            ) from None
        return folder
    except OSError as exc:
        raise ConfigError(f"cannot read {folder}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(found.st_mode):
        raise ConfigError(
            f"{folder} is a symbolic link: drgpu never writes through one",
            hint="remove the link; drgpu creates the folder itself",
        )
    if not stat.S_ISDIR(found.st_mode):
        raise ConfigError(
            f"{folder} is not a folder: drgpu keeps its override files in it",
            hint="move that file away; drgpu creates the folder itself",
        )
    return folder


def write_owned_file(path: Path, text: str, *, private: bool = True) -> None:
    """Write `text` atomically, refusing to replace any file drgpu did not write; readable
    by its owner alone when `private` (the default: it may hold a secret), else by all."""
    if path.is_symlink() or (path.exists() and not written_by_drgpu(path)):
        raise ConfigError(
            f"refusing to overwrite {path}: drgpu did not write it",
            hint="choose another --output path, or move that file away",
        )
    if path.parent.name == STATE_DIR:
        _checked_state_dir(path.parent)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        os.fchmod(handle, 0o600 if private else 0o644)
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def written_by_drgpu(path: Path) -> bool:
    """Whether `path` starts with the header drgpu writes on its own files."""
    try:
        with path.open(encoding="utf-8") as stream:
            return stream.readline().startswith(HEADER_MARK)
    except (OSError, UnicodeDecodeError):
        return False


@contextlib.contextmanager
def removed_on_failure(*paths: Path, made: Path | None = None) -> Iterator[None]:
    """On any failure inside the block, remove each of `paths` that drgpu wrote there (a
    file that was there before stays, as does any file drgpu did not write), then the
    folder this `up` `made` when nothing else is left in it: a failed `up` leaves no file."""
    existed = {path for path in paths if path.exists() or path.is_symlink()}
    try:
        yield
    except BaseException:
        for path in paths:
            if path not in existed and not path.is_symlink() and written_by_drgpu(path):
                path.unlink(missing_ok=True)
        if made is not None:
            with contextlib.suppress(OSError):
                made.rmdir()  # only when empty
        raise
