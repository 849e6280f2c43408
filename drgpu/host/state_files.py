"""drgpu's own files: the `.drgpu` folder beside the settings file, trusted only as OpenSSH
trusts `~/.ssh` (docs/limits.md), and files written there (or by `render -o`) atomically,
never over a file drgpu did not write."""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import stat
from collections.abc import Iterator
from pathlib import Path

from drgpu.core.inputs import STATE_DIR
from drgpu.core.model import HEADER_MARK
from drgpu.errors import ConfigError
from drgpu.host.files import Bound, read_bounded, read_head


def override_path(env_file: Path, project: str) -> Path:
    """drgpu's own override file, in a `.drgpu` folder beside the settings file."""
    return env_file.resolve().parent / STATE_DIR / f"{project}.override.yml"


def stack_path(override: Path, project: str) -> Path:
    """drgpu's Swarm stack file of `project`, beside its compose override."""
    return override.with_name(f"{project}.swarm.yml")


def swarm_override_path(override: Path, project: str) -> Path:
    """drgpu's override of DRfC's swarm files for `project`, beside its compose override."""
    return override.with_name(f"{project}.swarm-override.yml")


def state_dir(env_file: Path, *, create: bool = True) -> Path:
    """The `.drgpu` folder beside the settings file (created when missing and `create`),
    refused unless trusted (docs/limits.md)."""
    return _checked_state_dir(env_file.resolve().parent / STATE_DIR, create=create)


def new_state_dir(env_file: Path) -> Path | None:
    """`state_dir`, created; the folder when this call made it, else None."""
    there = state_dir(env_file, create=False).exists()
    folder = state_dir(env_file)  # checked (and made) either way
    return None if there else folder


def _checked_state_dir(folder: Path, *, create: bool = True) -> Path:
    try:
        found = folder.lstat()
    except FileNotFoundError:
        if not create:
            return folder
        _check_trusted_above(folder)
        try:
            folder.mkdir(mode=0o755)
        except FileExistsError:
            return _checked_state_dir(folder)
        except OSError as exc:
            raise ConfigError(
                f"cannot create {folder}: {exc.strerror or exc}",
                hint="drgpu keeps its override beside the settings file: make that folder writable",
            ) from None
        return _checked_state_dir(folder, create=False)
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
    _check_trusted(folder, found, sticky_ok=False)
    _check_trusted_above(folder)
    return folder


def _trusted_owners() -> set[int]:
    """Whose files drgpu trusts: root, this user, and under sudo the user who ran it."""
    owners = {0, os.geteuid()}
    sudo_uid = os.environ.get("SUDO_UID", "")
    if os.geteuid() == 0 and sudo_uid.isdecimal() and sudo_uid.isascii():
        owners.add(int(sudo_uid))
    return owners


def _check_trusted_above(folder: Path) -> None:
    """Every folder above `folder`, up to `/`, as `_check_trusted` says."""
    for above in folder.parents:
        try:
            found = above.lstat()
        except OSError as exc:
            raise ConfigError(f"cannot read {above}: {exc.strerror or exc}") from None
        _check_trusted(above, found, sticky_ok=True)


def _check_trusted(path: Path, found: os.stat_result, *, sticky_ok: bool) -> None:
    """A ConfigError unless `path` (lstat `found`) belongs to a trusted owner and nobody
    else can write it (a sticky folder, where `sticky_ok`, or a user-private group aside)."""
    if found.st_uid not in _trusted_owners():
        raise ConfigError(
            f"{path} belongs to {_named(found.st_uid)}, not to you or root: drgpu does not"
            " trust its files there (someone else could swap the override Compose reads)",
            hint=f"remove {path} (drgpu creates its folder itself)"
            if path.name == STATE_DIR
            else "keep the settings in a folder of your own",
        )
    mode = found.st_mode
    if sticky_ok and mode & stat.S_ISVTX:
        return  # like /tmp: nobody renames or removes what is ours below it
    if mode & stat.S_IWOTH or (mode & stat.S_IWGRP and not _private_group(found)):
        writers = (
            "everybody" if mode & stat.S_IWOTH else f"group {_named(found.st_gid, group=True)}"
        )
        raise ConfigError(
            f"{path} is writable by {writers} (mode {stat.S_IMODE(mode):04o}): drgpu does not"
            " trust its files there (someone else could swap the override Compose reads)",
            hint=f"chmod go-w {path}, or keep the settings in a folder only you can write",
        )


def _private_group(found: os.stat_result) -> bool:
    """Whether the file's group has one member, its owner, as primary or supplementary
    group (a user-private group, as Debian's OpenSSH judges it)."""
    try:
        group = grp.getgrgid(found.st_gid)
        owner = pwd.getpwuid(found.st_uid)
    except KeyError:
        return False
    primaries = {user.pw_uid for user in pwd.getpwall() if user.pw_gid == found.st_gid}
    others = primaries - {found.st_uid} or set(group.gr_mem) - {owner.pw_name}
    return not others and bool(primaries or group.gr_mem)


def _named(number: int, *, group: bool = False) -> str:
    """A user (or group) id with its name when it has one: `alice (uid 1000)`."""
    try:
        name = grp.getgrgid(number).gr_name if group else pwd.getpwuid(number).pw_name
    except KeyError:
        return f"{'gid' if group else 'uid'} {number}"
    return f"{name} ({'gid' if group else 'uid'} {number})"


def write_owned_file(path: Path, text: str, *, private: bool = True) -> None:
    """Write `text` atomically, never over a file drgpu did not write or a non-regular file
    (a FIFO is never opened); readable by its owner alone when `private` (it may hold a
    secret), else by all."""
    if path.parent.name == STATE_DIR:
        _checked_state_dir(path.parent)
    existing = _existing(path)
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(existing.st_mode) else "not a regular file"
        raise ConfigError(
            f"refusing to write {path}: it is {what}",
            hint="choose another --output path, or move that away",
        )
    if existing is not None and not written_by_drgpu(path):
        raise ConfigError(
            f"refusing to overwrite {path}: drgpu did not write it",
            hint="choose another --output path, or move that file away",
        )
    if existing is not None and path.parent.name == STATE_DIR:
        _check_trusted(path, existing, sticky_ok=False)
    import tempfile  # lazy: render to stdout writes nothing

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


def read_own_output(path: Path) -> bytes | None:
    """The bytes of the regular file (no link followed) at an output path drgpu may replace
    (`render -o`); None when no regular file is there."""
    found = _existing(path)
    if found is None or not stat.S_ISREG(found.st_mode):
        return None
    return read_bounded(path, Bound.OWN, "file", follow_links=False)


def _existing(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None


def written_by_drgpu(path: Path) -> bool:
    """Whether `path` is a regular file (no link followed, no FIFO waited on) that starts
    with the header drgpu writes; only that header is read."""
    head = read_head(path, len(HEADER_MARK.encode()))
    return head is not None and head.startswith(HEADER_MARK.encode())


@contextlib.contextmanager
def removed_on_failure(*paths: Path, made: Path | None = None) -> Iterator[None]:
    """On any failure inside the block, remove each of `paths` drgpu wrote there (not one
    there before), then the folder `made` if empty: a failed `up` leaves no file."""
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
