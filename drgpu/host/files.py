"""The files drgpu reads (settings, compose and inventory files, daemon.json, its own
packaged files, /proc) and the environment, handed to the pure core as texts and mappings.
Every read is bounded, and only a regular file is read (docs/limits.md)."""

from __future__ import annotations

import errno
import functools
import os
import stat
from collections.abc import Mapping, Sequence
from contextlib import suppress
from enum import IntEnum
from pathlib import Path

from drgpu.core.compose_stack import ComposeText, Stack, stack_from_texts
from drgpu.core.inputs import Inputs
from drgpu.core.model import Inventory
from drgpu.core.settings import Config, config_from_texts, settings_files
from drgpu.core.topology import inventory_from_text
from drgpu.errors import ConfigError

_MIB = 1024 * 1024
_KINDS = {  # what is not a regular file
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


class Bound(IntEnum):
    """The most bytes drgpu reads of each kind of file (docs/limits.md)."""

    SETTINGS = 1 * _MIB  # system.env, run.env
    COMPOSE = 1 * _MIB  # each compose file (a dense one parses in about 2 s)
    INVENTORY = 4 * _MIB  # an --inventory topology
    DAEMON_JSON = 1 * _MIB  # /etc/docker/daemon.json, the NVIDIA runtime's config.toml
    OWN = 1 * _MIB  # drgpu's own files: its templates, the first line of what it wrote
    SYSTEM = 64 * 1024  # /proc and /etc facts: boot id, machine id, a process's stat


def read_bounded(path: Path, bound: Bound, what: str, *, follow_links: bool = True) -> bytes:
    """The bytes of the regular file `path` (or of drgpu's own piped standard input), at
    most `bound` of them: else a ConfigError naming `what` and the path (also for a
    symbolic link where `follow_links` is false)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        descriptor = os.open(path, flags)
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {_reason(exc)}") from None
    try:
        found = os.fstat(descriptor)
        piped = False  # another's FIFO is refused: nothing may keep drgpu waiting
        with suppress(OSError):  # no standard input
            piped = stat.S_ISFIFO(found.st_mode) and os.path.samestat(found, os.fstat(0))
        if piped:  # `drgpu gpus --json | drgpu plan --inventory /dev/stdin`: what the user piped
            os.set_blocking(descriptor, True)
        elif not stat.S_ISREG(found.st_mode):
            kind = _KINDS.get(stat.S_IFMT(found.st_mode), "not a regular file")
            raise ConfigError(
                f"{what} {path} is {kind}, not a regular file: drgpu reads only regular files"
            )
        if found.st_size > bound:
            raise ConfigError(_too_large(what, path, bound))
        data = bytearray()
        while len(data) <= bound and (chunk := os.read(descriptor, bound + 1 - len(data))):
            data += chunk
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {_reason(exc)}") from None
    finally:
        os.close(descriptor)
    if len(data) > bound:
        raise ConfigError(_too_large(what, path, bound))
    return bytes(data)


def read_text_bounded(path: Path, bound: Bound, what: str, *, follow_links: bool = True) -> str:
    """`read_bounded`, decoded as UTF-8 (a ConfigError when it is not)."""
    try:
        return read_bounded(path, bound, what, follow_links=follow_links).decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path}: not UTF-8 text") from None


def read_head(path: Path, size: int) -> bytes | None:
    """The first `size` bytes (at most) of the regular file `path`, no link followed and no
    FIFO waited on; None for anything else or what cannot be read."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return os.read(descriptor, size) if stat.S_ISREG(os.fstat(descriptor).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(descriptor)


def read_system(path: Path) -> str | None:
    """A small system file (/proc, /etc/machine-id), as text; None when it cannot be read."""
    try:
        return read_bounded(path, Bound.SYSTEM, "file").decode("utf-8", errors="replace")
    except ConfigError:
        return None


def _too_large(what: str, path: Path, bound: Bound) -> str:
    size = f"{bound // _MIB} MiB" if bound % _MIB == 0 else f"{bound // 1024} KiB"
    return f"{what} {path} is larger than {size}, the most drgpu reads of it (docs/limits.md)"


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a symbolic link, which drgpu does not follow here"
    if exc.errno == errno.ENXIO:
        return "a socket or a device without a reader, not a regular file"
    return exc.strerror or str(exc)


def read_settings(target: Inputs, environ: Mapping[str, str] | None = None) -> Config:
    """The settings of what the command line names, evaluated against `environ` (default:
    this process's, with the variables bash sets itself whose values are certain here)."""
    run_env = target.run_env or target.env_file.with_name("run.env")
    existing = {path for path in (target.env_file, run_env) if exists(path)}
    paths, warnings = settings_files(
        target.env_file, target.run_env, existing, drfc=target.drfc_settings
    )
    if environ is None:
        import socket  # lazy: only where settings are read

        uids = {"UID": str(os.getuid()), "EUID": str(os.geteuid())}
        environ = {**os.environ, **uids, "HOSTNAME": socket.gethostname()}
    return config_from_texts(
        [(path, read_text_bounded(path, Bound.SETTINGS, "settings file")) for path in paths],
        environ,
        evaluation=target.evaluation,
        drfc=target.drfc_settings,
        warnings=warnings,
    )


def exists(path: Path, *, file: bool = False) -> bool:
    """Whether anything (with `file`: a file) is at `path`; a name the system refuses (too
    long) is a `ConfigError`."""
    try:
        return path.is_file() if file else path.exists()
    except OSError as exc:
        raise ConfigError(f"cannot read {str(path)[:80]!r}: {exc.strerror or exc}") from None


def load_stack(files: Sequence[Path]) -> Stack:
    """The stack of compose files, each read when the core comes to it (first problem first)."""
    return stack_from_texts(
        ComposeText(path, path.resolve(), read_text_bounded(path, Bound.COMPOSE, "compose file"))
        for path in files
    )


def load_inventory(path: Path) -> Inventory:
    """Read an inventory file (a topology JSON document, `drgpu.core.topology`)."""
    return inventory_from_text(read_text_bounded(path, Bound.INVENTORY, "inventory"), str(path))


def base_stack_file() -> Path:
    """drgpu's own base stack: `compose/docker-compose.yml` (installed or in the source tree)."""
    return _required(_packaged("compose", "docker-compose.yml"), "drgpu's base stack")


def override_header_template() -> str | None:
    """The compose override's header template (`templates/override-header.txt`), if installed."""
    found = _packaged("templates", "override-header.txt")
    return None if found is None else read_text_bounded(found, Bound.OWN, "drgpu's template")


@functools.cache
def probe_source() -> str:
    """drgpu's probe as the text that runs in containers (read once a process)."""
    from drgpu import probe  # lazy: a large module, run elsewhere only by the proofs

    return read_bounded(Path(probe.__file__), Bound.OWN, "drgpu's probe").decode()


def example_settings() -> str:
    """`system.env.example`: every setting drgpu reads, with its default."""
    found = _required(_packaged(".", "system.env.example"), "system.env.example")
    return found.read_text(encoding="utf-8")


def write_new_file(path: Path, text: str) -> None:
    """Write `text` to a file that must not exist yet (nothing the user wrote is replaced)."""
    try:
        with path.open("x", encoding="utf-8") as file:
            file.write(text)
    except FileExistsError:
        raise ConfigError(f"{path} exists; drgpu never writes over it") from None
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from None


def _packaged(folder: str, name: str) -> Path | None:
    """A data file of drgpu's own: installed (`drgpu/_data/<folder>`) or in the source tree."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_data" / folder, package.parent / folder):
        if (candidate / name).is_file():
            return candidate / name
    return None


def _required(found: Path | None, what: str) -> Path:
    if found is None:
        raise ConfigError(f"{what} is missing from this installation", hint="reinstall")
    return found


# --- the NVIDIA container toolkit and the device nodes on this host -------------------------

HOOK = "nvidia-container-runtime-hook"
TOOLKIT_CONFIG = Path("/etc/nvidia-container-runtime/config.toml")


def hook_installed() -> bool:
    """Whether `nvidia-container-runtime-hook` is on PATH or where its packages put it."""
    import shutil  # lazy: only the checks that ask need it

    return shutil.which(HOOK) is not None or any(
        Path(folder, HOOK).is_file() for folder in ("/usr/bin", "/usr/local/bin")
    )


def optional_text(path: Path) -> str | None:
    """A node's file as text (daemon.json, the NVIDIA runtime's config.toml); None when
    there is none, a `ConfigError` when it cannot be read."""
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return read_text_bounded(path, Bound.DAEMON_JSON, path.name)
    except ConfigError as exc:
        raise ConfigError(f"cannot be read: {exc.message}") from None


def nvidia_device_nodes() -> dict[str, tuple[int, int]]:
    """Each NVIDIA character device node (`/dev/nvidia*`) with its major and minor number."""
    found: dict[str, tuple[int, int]] = {}
    for node in sorted(Path("/dev").glob("nvidia*")):
        try:
            info = node.stat()
        except OSError:
            continue
        if stat.S_ISCHR(info.st_mode):
            found[str(node)] = (os.major(info.st_rdev), os.minor(info.st_rdev))
    return found


def char_links() -> frozenset[str]:
    """The `major:minor` names in /dev/char (systemd's links to device nodes)."""
    try:
        return frozenset(entry.name for entry in Path("/dev/char").iterdir())
    except OSError:
        return frozenset()
