"""The DeepRacer-for-cloud-shaped checkout of the tests (tests/drfc/checkout), and its
activated shell.

Written for drgpu (no DRfC file is copied): `bin/activate.sh` reads system.env and the
run.env exactly as DRfC's `dr-update-env` does (`grep -v '^#'`, a `for` over the words,
`cut -d=`, `eval "export $key=$value"`) and exports what DRfC's activation exports; the
scripts start and stop the stack as DRfC's do. `activated(root, run_env)` sources it in
bash and returns the exported environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent / "checkout"
RUN_ENV = (CHECKOUT / "run.env").read_text(encoding="utf-8")


def _bash_function(script: Path, name: str) -> str:
    text = script.read_text(encoding="utf-8")
    start = text.index(f"{name}() {{")
    return text[start : text.index("\n}\n", start) + 3]


# How activation reads each settings file (DRfC's loop): the oracle of the bash tests.
LOAD_ENV_FILE = _bash_function(CHECKOUT / "bin" / "activate.sh", "_dr_load_env_file")


def make_checkout(root: Path, **system_values: str) -> Path:
    """A copy of the fixture checkout at `root`, these keys of its system.env changed."""
    shutil.copytree(CHECKOUT, root)
    if system_values:
        set_values(root / "system.env", **system_values)
    return root


def set_values(path: Path, **values: str) -> None:
    """Change (or add) keys of a settings file, keeping every other line."""
    lines = path.read_text().splitlines() if path.exists() else []
    for key, value in values.items():
        lines = [line for line in lines if not line.startswith(f"{key}=")]
        lines.append(f"{key}={value}")
    path.write_text("\n".join(lines) + "\n")


def activated(root: Path, *args: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment `source bin/activate.sh ARGS` exports, run by bash in `root`. Without
    `base`, a bare environment whose Docker engine is nowhere (activation asks for one)."""
    environment = base or {
        "PATH": os.environ["PATH"],
        "HOME": str(root),
        "DOCKER_HOST": f"unix://{root}/no-engine.sock",
    }
    done = subprocess.run(
        ["bash", "-c", 'source bin/activate.sh "$@" >&2 && env -0', "activate", *args],
        cwd=root,
        env=environment,
        capture_output=True,
        timeout=60,
        check=True,
    )
    pairs = (item.partition("=") for item in done.stdout.decode().split("\0") if item)
    return {key: value for key, _, value in pairs if key not in ("_", "SHLVL", "PWD", "OLDPWD")}
