"""The `drgpu` command and `python -m drgpu`: `--version` and `--help` are answered without
loading the command line (typer and click are most of a start-up), the rest by drgpu.cli.
help.txt is `drgpu --help` as typer writes it 78 columns wide (a test keeps them equal)."""

import os
import sys


def _quick(args: list[str]) -> str | None:
    """What `drgpu --version` or `drgpu --help` prints, or None where drgpu.cli answers."""
    if "_DRGPU_COMPLETE" in os.environ:  # shell completion: typer's
        return None
    if args in (["--version"], ["version"]):
        from drgpu import __version__

        return f"{__version__}\n"
    if args in ([], ["--help"]) and _columns() >= 80:  # narrower: typer wraps it anew
        with open(os.path.join(os.path.dirname(__file__), "help.txt")) as file:
            return file.read()
    return None


def _columns() -> int:
    """The terminal's width as click reads it (shutil.get_terminal_size, without its
    imports); a width below 1 makes typer answer."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size().columns
    except (ValueError, OSError):
        return 80  # no terminal: shutil's fallback


def main() -> None:
    """Run drgpu with this process's arguments."""
    text = _quick(sys.argv[1:])
    if text is None:
        from drgpu.cli import main as cli_main

        cli_main()
        return
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left (`drgpu --help | head -1`), as drgpu.cli does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()
