"""Shared pytest plumbing: the Docker test bed behind tests marked `docker`, and the
fixtures every kind of test uses: `cli` (drgpu run in-process) and `new_run` (run ids).

The `bed` fixture starts (once per session, only when a docker-marked test runs)
a private dockerd through `scripts/testbed`: the real engine, the real Compose v2
binary, and the engine's own NVIDIA device-request code, whose OCI hook is our
stub (tests/bed/bin/nvidia-container-runtime-hook) over a fake GPU topology.

With CI=true or DRGPU_REQUIRE_DOCKER=1 a docker-marked test never skips: when the
bed cannot start it errors, and a skip is reported as a failure.  Elsewhere the
tests skip when the tooling is missing (not root, no dockerd, no mmdebstrap...).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from tests.support.runners import Cli, run_main

REPO = Path(__file__).resolve().parent.parent
TESTBED = REPO / "scripts" / "testbed"
IMAGE = "drgpu-test/python:bookworm"
START_TIMEOUT_S = 900  # a cold start builds the image: ~30 s here, more on a slow mirror
# Variables that would point the docker CLI or Compose somewhere else.
FOREIGN_ENV = (
    "DOCKER_CONTEXT",
    "DOCKER_TLS",
    "DOCKER_TLS_VERIFY",
    "DOCKER_CERT_PATH",
    "COMPOSE_FILE",
    "COMPOSE_PROJECT_NAME",
    "COMPOSE_PROFILES",
    "COMPOSE_ENV_FILES",
)


def docker_required() -> bool:
    """True where docker-marked tests must run (CI): they never skip there."""
    return (
        os.environ.get("CI", "").lower() == "true" or os.environ.get("DRGPU_REQUIRE_DOCKER") == "1"
    )


class BedCommandError(subprocess.CalledProcessError):
    """A failed docker/compose call, with its output in the message."""

    def __str__(self) -> str:
        return (
            f"{super().__str__()}\n--- stdout ---\n{self.stdout or ''}"
            f"\n--- stderr ---\n{self.stderr or ''}"
        )


def _run(
    argv: list[str],
    *,
    env: dict[str, str],
    check: bool,
    cwd: Path | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise BedCommandError(proc.returncode, argv, proc.stdout, proc.stderr)
    return proc


@dataclass(frozen=True)
class Bed:
    """A running test engine and how to talk to it."""

    dir: Path
    docker_host: str
    docker_bin: Path
    compose_bin: Path
    image: str
    nvml_lib_dir: Path
    topology_path: Path
    records_dir: Path
    pynvml_py: Path
    swarm: bool = False  # a swarm manager: its runs are stacks, not Compose projects

    def set_topology(self, data: dict[str, Any]) -> None:
        """Replace the host's fake GPUs (read by the hook at each container start)."""
        tmp = self.topology_path.with_name(f".{self.topology_path.name}.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(self.topology_path)

    def records(self) -> list[dict[str, Any]]:
        """The hook's records (one per container start it saw), oldest first."""
        files = [p for p in self.records_dir.glob("*.json") if not p.name.startswith(".")]
        files.sort(key=lambda p: (p.stat().st_mtime_ns, p.name))
        return [json.loads(p.read_text()) for p in files]

    def clear_records(self) -> None:
        for path in self.records_dir.glob("*.json"):
            path.unlink(missing_ok=True)

    def env(self, **extra: str | os.PathLike[str]) -> dict[str, str]:
        """os.environ pointed at the bed, for drgpu or pynvml run on the "host"."""
        env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
        ld_path = [str(self.nvml_lib_dir), *filter(None, [env.get("LD_LIBRARY_PATH")])]
        env.update(
            DOCKER_HOST=self.docker_host,
            FAKE_NVML_TOPOLOGY=str(self.topology_path),
            LD_LIBRARY_PATH=os.pathsep.join(ld_path),
            DRGPU_COMPOSE=str(self.compose_bin),
            DRGPU_INDEX_ORDER="pci",  # the bed's CUDA order differs: its tests mean nvidia-smi's
        )
        env.update({key: os.fspath(value) for key, value in extra.items()})
        return env

    def docker(
        self, *args: str | os.PathLike[str], check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """The docker CLI against the bed (text, captured)."""
        argv = [str(self.docker_bin), *(os.fspath(a) for a in args)]
        return _run(argv, env=self.env(), check=check, timeout=timeout)

    def compose(
        self,
        *args: str | os.PathLike[str],
        project_dir: Path,
        check: bool = True,
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        """The Compose binary against the bed, run in (and rooted at) project_dir."""
        argv = [
            str(self.compose_bin),
            "--project-directory",
            str(project_dir),
            *(os.fspath(a) for a in args),
        ]
        return _run(argv, env=self.env(), check=check, cwd=project_dir, timeout=timeout)

    def remove_run(self, run_id: str) -> None:
        """Remove what a run left on this engine: its stack on a swarm manager, else its
        Compose project."""
        if self.swarm:
            stack = f"deepracer-{run_id}"
            self.docker("stack", "rm", stack, check=False)
            # `stack rm` returns before the tasks' containers are gone (and their GPU claims:
            # the next test's plan would see them held)
            label = f"label=com.docker.stack.namespace={stack}"
            ids = self.docker("ps", "-aq", "--filter", label, check=False).stdout.split()
            if ids:
                self.docker("rm", "-f", "-v", *ids, check=False)
        else:
            self.cleanup_project(f"deepracer-{run_id}")

    def cleanup_project(self, name: str) -> None:
        """Remove every container, network and volume of a Compose project."""
        label = f"label=com.docker.compose.project={name}"
        for kind, remove in (
            ("container", ("rm", "-f", "-v")),
            ("network", ("rm",)),
            ("volume", ("rm", "-f")),
        ):
            ids = self.docker(
                kind, "ls", "-aq" if kind == "container" else "-q", "--filter", label, check=False
            ).stdout.split()
            if ids:
                self.docker(kind, *remove, *ids, check=False)


def _compose_bin() -> Path | None:
    venv_bin = str(Path(sys.executable).parent)
    found = shutil.which("docker-compose", path=venv_bin) or shutil.which("docker-compose")
    return Path(found) if found else None


def _pynvml_py() -> Path | None:
    spec = importlib.util.find_spec("pynvml")
    return Path(spec.origin) if spec and spec.origin else None


def _missing_tooling() -> str | None:
    """Why the bed cannot even be tried here, or None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root (it runs a private dockerd)"
    for tool, hint in (
        ("dockerd", "scripts/setup-test"),
        ("docker", "the docker CLI"),
        ("mmdebstrap", "scripts/setup-test"),
        ("gcc", "scripts/setup-test"),
    ):
        if not shutil.which(tool):
            return f"{tool} is missing (install: {hint})"
    if _compose_bin() is None:
        return "docker-compose is missing (install: scripts/setup-test)"
    if _pynvml_py() is None:
        return "pynvml (nvidia-ml-py) is missing"
    if not (REPO / "scripts" / "fake-nvml-build").is_file():
        return "scripts/fake-nvml-build is missing"
    return None


def _unavailable(reason: str) -> None:
    if docker_required():
        pytest.fail(
            f"docker test bed unavailable (CI=true/DRGPU_REQUIRE_DOCKER=1): {reason}", pytrace=False
        )
    pytest.skip(f"docker test bed unavailable: {reason}")


def _read_bed_env(root: Path) -> dict[str, str]:
    values = {}
    for line in (root / "bed.env").read_text().splitlines():
        key, _, value = line.partition("=")
        values[key] = value.strip("'")
    return values


def _stop(root: Path) -> None:
    if not root.exists():
        return
    proc = subprocess.run(
        [str(TESTBED), "stop", str(root)], capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode != 0:
        warnings.warn(f"scripts/testbed stop {root} failed: {proc.stderr.strip()}", stacklevel=1)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Let SIGTERM unwind like Ctrl-C so that the bed is still stopped."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def started_bed(prefix: str, **settings: str) -> Iterator[Bed]:
    """A private engine started by scripts/testbed (with its TESTBED_* `settings`) under a
    new temporary dir, stopped when the block ends, also on Ctrl-C or SIGTERM."""
    reason = _missing_tooling()
    if reason:
        _unavailable(reason)
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    atexit.register(_stop, root)  # also covers an interrupted session
    with _sigterm_as_interrupt():
        try:
            proc = subprocess.run(
                [str(TESTBED), "start", str(root)],
                env={**os.environ, **settings},
                capture_output=True,
                text=True,
                timeout=START_TIMEOUT_S,
                check=False,
            )
            if proc.returncode != 0:
                pytest.fail(
                    f"scripts/testbed start failed ({proc.returncode}):\n{proc.stderr[-4000:]}",
                    pytrace=False,
                )
            values = _read_bed_env(root)
            docker_host = proc.stdout.strip().splitlines()[-1].removeprefix("DOCKER_HOST=")
            assert docker_host == values["BED_DOCKER_HOST"], proc.stdout
            yield Bed(
                dir=root,
                docker_host=docker_host,
                docker_bin=Path(shutil.which("docker") or "docker"),
                compose_bin=_compose_bin() or Path("docker-compose"),
                image=IMAGE,
                nvml_lib_dir=Path(values["FAKE_NVML_LIB_DIR"]),
                topology_path=Path(values["FAKE_NVML_TOPOLOGY"]),
                records_dir=Path(values["DRGPU_BED_RECORDS"]),
                pynvml_py=_pynvml_py() or Path("pynvml.py"),
            )
        finally:
            _stop(root)
            atexit.unregister(_stop)


@pytest.fixture(scope="session")
def bed() -> Generator[Bed, None, None]:
    """The Docker test bed, started on first use and stopped at the end of the session."""
    with started_bed("drgpu-bed-") as started:
        yield started


@pytest.fixture(scope="session")
def other_bed() -> Generator[Bed, None, None]:
    """A second plain engine beside `bed`, for tests where two engines run at once."""
    with started_bed("drgpu-bed2-") as started:
        yield started


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Cli:
    """`cli("plan", "--json", ...)`: tests.support.runners.run_main in a fresh working
    directory (tmp_path), DRGPU_DEBUG unset and a 200-column terminal."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DRGPU_DEBUG", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    return run_main


NewRun = Callable[..., str]
# The fixtures of the engines a run may be made on (tests/swarm/conftest.py has the swarms).
ENGINE_FIXTURES = ("bed", "other_bed", "swarm_bed", "simulator_swarm_bed")
RUN_ID_LENGTH = 20  # of the test's name; DR_RUN_ID's suffix (`-a`) comes after it


@pytest.fixture
def new_run(request: pytest.FixtureRequest) -> Iterator[NewRun]:
    """The one source of run ids (DR_RUN_ID) on an engine: `new_run()` is an id unique to
    the test (made of its name), `new_run("a")` that id with `-a` after it. Afterwards
    every run made is removed (`Bed.remove_run`) from each engine the test uses."""
    engines: list[Bed] = [
        request.getfixturevalue(name) for name in ENGINE_FIXTURES if name in request.fixturenames
    ]
    base = "".join(c for c in request.node.name.lower() if c.isalnum())[-RUN_ID_LENGTH:]
    made: list[str] = []

    def make(suffix: str = "") -> str:
        run_id = f"{base}-{suffix}" if suffix else base
        if run_id not in made:
            made.append(run_id)
        return run_id

    yield make
    for engine in engines:
        for run_id in made:
            engine.remove_run(run_id)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Where docker is required, a skipped docker-marked test counts as failed."""
    report = yield
    if (
        report.skipped
        and not hasattr(report, "wasxfail")
        and docker_required()
        and item.get_closest_marker("docker") is not None
    ):
        why = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (
            f"docker-marked test skipped although CI=true/DRGPU_REQUIRE_DOCKER=1: {why}"
        )
    return report
