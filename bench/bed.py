"""What the benchmarks share: a private engine over the fake NVML (scripts/testbed),
commands that end the benchmark when they fail, and interleaved timing."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from drgpu.commands.proving import SETTLE_S

REPO = Path(__file__).resolve().parents[1]
TESTBED = REPO / "scripts" / "testbed"
IMAGE = "drgpu-test/python:bookworm"
BIN = Path(sys.executable).parent
BEYOND_SETTLE_TARGET_S = 0.15  # what `up` may add beyond the settle (issue 18)


@dataclass(frozen=True)
class Bed:
    """A started private engine: its folder and the values of its bed.env."""

    dir: Path
    values: dict[str, str]

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment pointed at the engine and the fake NVML, as installed
        (byte-compiled modules are cached, not compiled on every call)."""
        environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        return {
            **environ,
            "DOCKER_HOST": self.values["BED_DOCKER_HOST"],
            "FAKE_NVML_TOPOLOGY": self.values["FAKE_NVML_TOPOLOGY"],
            "LD_LIBRARY_PATH": self.values["FAKE_NVML_LIB_DIR"],
            **extra,
        }

    def set_topology(self, topology: object) -> None:
        """The GPUs the fake NVML reports from now on."""
        Path(self.values["FAKE_NVML_TOPOLOGY"]).write_text(json.dumps(topology))


@contextmanager
def private_engine(**settings: str) -> Iterator[Bed]:
    """Start a private engine with scripts/testbed (its TESTBED_* `settings`), and stop it
    after."""
    folder = Path(tempfile.mkdtemp(prefix="drgpu-bench-", dir="/tmp"))
    try:
        started = subprocess.run(
            [str(TESTBED), "start", str(folder)],
            env={**os.environ, **settings},
            capture_output=True,
            text=True,
            check=False,
        )
        if started.returncode != 0:
            sys.exit(f"bench: scripts/testbed start failed:\n{started.stderr[-2000:]}")
        lines = (folder / "bed.env").read_text().splitlines()
        values = dict(line.split("=", 1) for line in lines if "=" in line)
        yield Bed(folder, {key: value.strip("'") for key, value in values.items()})
    finally:
        subprocess.run([str(TESTBED), "stop", str(folder)], capture_output=True, check=False)


def run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> str:
    """Run a command and return its stdout; a failure ends the benchmark with its output."""
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"bench: {' '.join(argv[:4])} failed:\n{(done.stdout + done.stderr)[-2000:]}")
    return done.stdout


def timed(step: Callable[[], object]) -> float:
    """The wall time of one call of `step`, in seconds."""
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def interleaved_medians(
    pairs: Mapping[str, tuple[Callable[[], object], Callable[[], object]]], runs: int
) -> dict[str, float]:
    """The median wall time of each timed step, each followed by its untimed `after`;
    interleaved, so that drift hits every side alike."""
    samples: dict[str, list[float]] = {name: [] for name in pairs}
    for _ in range(runs):
        for name, (step, after) in pairs.items():
            samples[name].append(timed(step))
            after()
    return {name: statistics.median(values) for name, values in samples.items()}


def beyond_the_settle(up: float, baseline: float) -> str:
    """What `drgpu up` adds to its baseline beyond the verification's settle (every
    container must have run SETTLE_S), against the target."""
    added = up - baseline - SETTLE_S
    return (
        f"up adds {added * 1000:+.0f} ms beyond the {SETTLE_S * 1000:.0f} ms settle"
        f" (target < {BEYOND_SETTLE_TARGET_S * 1000:.0f} ms)"
    )
