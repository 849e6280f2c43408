"""drgpu's start-up against a bare interpreter, measured in one run.

    .venv/bin/python bench/bench_startup.py [--runs N]

Medians of wall and CPU time (user + system, which a busy machine inflates less) of
`drgpu --version`, `drgpu --help` and `drgpu plan --help` as installed (the console script),
interleaved with `python -c pass`. Target (issue 26): `drgpu --version` and `drgpu --help`
under 60 ms. Needs no engine.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import time

from bed import BIN

TARGET_S = 0.060
COMMANDS = {
    "python -c pass": [str(BIN / "python"), "-c", "pass"],
    "drgpu --version": [str(BIN / "drgpu"), "--version"],
    "drgpu --help": [str(BIN / "drgpu"), "--help"],
    "drgpu plan --help": [str(BIN / "drgpu"), "plan", "--help"],
}


def cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def main() -> None:
    """Run each command alternately, print medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    runs = parser.parse_args().runs
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    wall: dict[str, list[float]] = {name: [] for name in COMMANDS}
    cpu: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(runs + 1):  # the first round fills the byte code cache, uncounted
        for name, argv in COMMANDS.items():
            start, start_cpu = time.perf_counter(), cpu_s()
            subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(cpu_s() - start_cpu)
    print(f"runs per command: {runs} (medians)")
    for name in COMMANDS:
        w, c = statistics.median(wall[name][1:]), statistics.median(cpu[name][1:])
        quick = name in ("drgpu --version", "drgpu --help")
        target = f" (target < {TARGET_S * 1000:.0f} ms)" if quick else ""
        print(f"{name:18} wall {w * 1000:6.1f} ms | cpu {c * 1000:6.1f} ms{target}")


if __name__ == "__main__":
    main()
