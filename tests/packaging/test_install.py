"""drgpu as people install it: `python -m build` makes an sdist and a wheel (built from that
sdist) that carry the base stack, the templates and system.env.example; a clean venv and
pipx install the wheel, and the installed `drgpu` plans the README's example box and knows
its version; the README's "Try it" commands, run as written in a fresh copy of the source
tree, work.

Offline and quick: the build runs without isolation (the build backend is in the test
venv), and the clean venvs get drgpu's dependencies from the test venv through a `.pth`
line instead of an index (pip installs nothing but the wheel).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from drgpu import __version__

REPO = Path(__file__).resolve().parents[2]
README_COMMAND = (
    "plan",
    "--env-file",
    "system.env.example",
    "--inventory",
    "examples/inventories/gtx1650-m40.json",
)
DATA_FILES = (
    "drgpu/_data/compose/docker-compose.yml",
    "drgpu/_data/templates/override-header.txt",
    "drgpu/_data/system.env.example",
)


def run(
    *args: str | Path, cwd: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env={
            **os.environ,
            "PIP_NO_INDEX": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{args}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, REPO)
    yield out


def the(dist: Path, pattern: str) -> Path:
    (found,) = dist.glob(pattern)
    return found


@pytest.fixture(scope="module")
def dependencies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder showing everything the test venv has installed but drgpu itself."""
    view = tmp_path_factory.mktemp("dependencies")
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        if not entry.name.lower().startswith(("drgpu", "_editable_impl_drgpu")):
            (view / entry.name).symlink_to(entry)
    return view


def share(dependencies: Path, venv_python: Path) -> None:
    """Let a venv import drgpu's dependencies from `dependencies`, behind its own packages."""
    purelib = subprocess.run(
        [str(venv_python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "zz-dependencies.pth").write_text(f"{dependencies}\n")


@pytest.fixture(scope="module")
def venv(dist: Path, dependencies: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean venv with the wheel installed (drgpu's dependencies shared, offline)."""
    venv = tmp_path_factory.mktemp("installed") / "venv"
    run(sys.executable, "-m", "venv", venv)
    share(dependencies, venv / "bin" / "python")
    run(venv / "bin" / "pip", "install", "--quiet", the(dist, "*.whl"))
    return venv


def test_the_sdist_and_the_wheel_carry_the_base_stack_and_templates(dist: Path) -> None:
    wheel = the(dist, f"drgpu-{__version__}-py3-none-any.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(DATA_FILES) <= names
    assert "drgpu/probe.py" in names and "drgpu/cli.py" in names
    with tarfile.open(the(dist, f"drgpu-{__version__}.tar.gz")) as sdist:
        members = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    for path in ("compose/docker-compose.yml", "templates/override-header.txt", "pyproject.toml"):
        assert path in members
    assert not any(name.startswith((".hypothesis", ".venv")) for name in members)


def test_a_clean_venv_installs_the_wheel_and_plans_the_example_box(
    venv: Path, tmp_path: Path
) -> None:
    version = run(venv / "bin" / "drgpu", "--version")
    planned = run(venv / "bin" / "drgpu", *README_COMMAND)
    where = run(venv / "bin" / "python", "-c", "import drgpu; print(drgpu.__file__)", cwd=tmp_path)

    assert version.stdout == f"{__version__}\n"
    assert "Tesla M40 24GB" in planned.stdout and "GTX 1650" in planned.stdout
    assert where.stdout.startswith(str(venv))  # the wheel's drgpu, not the repository's


def test_pipx_installs_the_wheel(dist: Path, dependencies: Path, tmp_path: Path) -> None:
    home, bin_dir, user_base = tmp_path / "pipx", tmp_path / "bin", tmp_path / "user"
    pipx = Path(sys.executable).parent / "pipx"
    # pipx reads the metadata of drgpu's dependencies in its venv (and drops PYTHONPATH):
    # there they come from the user site, which a venv with system site packages reads.
    user_site = subprocess.run(
        [sys.executable, "-c", "import site; print(site.getusersitepackages())"],
        env={**os.environ, "PYTHONUSERBASE": str(user_base)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(user_site).parent.mkdir(parents=True)
    Path(user_site).symlink_to(dependencies)
    env = {
        "PIPX_HOME": str(home),
        "PIPX_BIN_DIR": str(bin_dir),
        "PIPX_MAN_DIR": str(tmp_path / "man"),
        "PYTHONUSERBASE": str(user_base),
    }
    # --skip-maintenance: pipx's shared pip stays the bundled one (no index to upgrade from).
    run(
        pipx,
        "install",
        "--skip-maintenance",
        "--system-site-packages",
        "--pip-args=--no-deps",
        the(dist, "*.whl"),
        env=env,
    )

    assert run(bin_dir / "drgpu", "--version", env=env).stdout == f"{__version__}\n"
    assert "Tesla M40 24GB" in run(bin_dir / "drgpu", *README_COMMAND, env=env).stdout


def try_commands() -> list[str]:
    """The commands of the README's "Try it" section, in order (each line of its `sh`
    blocks)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Try it\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_the_readmes_try_commands_work_as_written(
    dist: Path, dependencies: Path, tmp_path: Path
) -> None:
    """In a copy of the source tree (the sdist), each command of "Try it" in turn: the
    venv, the install (drgpu's dependencies come from the test venv, offline), the plans."""
    with tarfile.open(the(dist, f"drgpu-{__version__}.tar.gz")) as sdist:
        sdist.extractall(tmp_path, filter="data")
    checkout = tmp_path / f"drgpu-{__version__}"
    shims = tmp_path / "shims"  # `python3` is this Python, whose packages are shared
    shims.mkdir()
    (shims / "python3").symlink_to(sys.executable)
    env = {
        "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(dependencies),
        "PIP_NO_BUILD_ISOLATION": "0",  # pip's spelling of --no-build-isolation
    }
    commands = try_commands()
    assert commands[0].startswith("python3 -m venv .venv") and "pip install" in commands[0]
    assert len(commands) >= 3, commands
    done = [
        run("bash", "-euo", "pipefail", "-c", command, cwd=checkout, env=env)
        for command in commands
    ]

    assert (checkout / ".venv" / "bin" / "drgpu").exists()
    box, crossed = done[1].stdout, done[2].stdout
    assert "1: Tesla M40 24GB (00000000:81:00.0)" in box
    assert "0: NVIDIA GeForce GTX 1650 (00000000:04:00.0)" in box
    assert "1: NVIDIA GeForce RTX 3090 (00000000:0A:00.0)" in crossed
    assert "RTX 3090" in done[2].stderr  # the warning: the orders differ there


def test_the_installed_drgpu_prints_the_example_settings(venv: Path, tmp_path: Path) -> None:
    printed = run(venv / "bin" / "drgpu", "example-env", cwd=tmp_path).stdout
    assert printed == (REPO / "system.env.example").read_text(encoding="utf-8")
