"""The `drgpu` command and `python -m drgpu`: `--version` and `--help` answered without
typer and click (most of a start-up), from help.txt (typer's help 78 columns wide, as a test
keeps it); the rest by drgpu.cli."""

import os
import sys


def _columns() -> int:
    """The terminal's width as click reads it (shutil.get_terminal_size, without its imports)."""
    try:
        return int(os.environ.get("COLUMNS") or os.get_terminal_size().columns)
    except (ValueError, OSError):
        return 80 if not os.environ.get("COLUMNS") else 0  # no terminal: shutil's fallback


def main() -> None:
    """Run drgpu with this process's arguments."""
    args, text = sys.argv[1:], None
    if "_DRGPU_COMPLETE" in os.environ:  # shell completion: typer's
        pass
    elif args in (["--version"], ["version"]):
        from drgpu import __version__

        text = f"{__version__}\n"
    elif args in ([], ["--help"]) and _columns() >= 80:  # narrower: typer wraps it anew
        with open(os.path.join(os.path.dirname(__file__), "help.txt")) as file:
            text = file.read()
    if text is None:
        import gc

        # Start-up makes tens of thousands of objects that live for the whole run: the
        # collector, run after every 700 new ones, would scan them some 50 times for nothing.
        gc.set_threshold(50_000)
        from drgpu.cli import main as cli_main

        try:
            return cli_main()
        finally:  # Python's exit collects every object once more: tens of ms, for nothing
            gc.freeze()
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left (`drgpu --help | head -1`), as drgpu.cli does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()
