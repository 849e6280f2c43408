"""Long-run health of `drgpu status --watch`: its memory over 10,000 refreshes on the fake
box, with every exporter on. Not timed: it prints the resident memory (RSS) after a
warm-up, every 1,000 refreshes, and at the end, and the ratio end / start.

    .venv/bin/python bench/bench_watch_memory.py [--refreshes N]

The box is bench_watch.py's (a private engine, 20 containers of one run on a fake NVML with
8 GPUs). The watch runs in this process as `status --watch` runs it (one NVML session, one
engine connection, `commands.status.watch`) with no pause between refreshes: each refresh
reads NVML and the engine, judges, builds the board with its history as the terminal view
does, sends line protocol over UDP to a socket of this process, publishes to a Prometheus
endpoint that is scraped every 100 refreshes, and keeps `--on-violation`'s state.

Inputs (issue 22): RSS at the end within 1.1x of the RSS after the warm-up.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from bed import private_engine
from bench_watch import start_containers, topology

WARMUP = 200


def rss_mib() -> float:
    """This process's resident memory, in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main() -> None:
    """Start the box, run the watch in this process, print the memory."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refreshes", type=int, default=10_000)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:  # the child, on the box's engine and NVML
        measure(args.refreshes)
        return
    with private_engine() as bed:
        env = bed.env()
        pids = start_containers(["docker"], env)
        bed.set_topology(topology(pids))
        argv = [sys.executable, __file__, "--inside", "--refreshes", str(args.refreshes)]
        sys.exit(subprocess.run(argv, env=env, check=False).returncode)


def measure(refreshes: int) -> None:
    """One watch of `refreshes` refreshes after the warm-up, printing RSS as it goes."""
    from drgpu.commands import status
    from drgpu.core.gpu_board import build_board, new_history, recorded
    from drgpu.core.gpu_usage import Status
    from drgpu.host import nvml
    from drgpu.ui.live import board_text

    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    received = [0]

    def drain() -> None:
        while receiver.recv(65536):
            received[0] += 1

    threading.Thread(target=drain, daemon=True).start()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options = status.StatusOptions(
        watch=True,
        interval_s=0.1,
        influx=f"udp://127.0.0.1:{receiver.getsockname()[1]}",
        prometheus=f"127.0.0.1:{port}",
        on_violation="true",
    )
    history = new_history(options.interval_s)
    shown = 0
    start = 0.0

    def show(snapshot: Status) -> None:
        nonlocal history, shown, start
        history = recorded(history, snapshot)
        board_text(build_board(snapshot, history), stamp="00:00:00", interval_s=1, width=200)
        shown += 1
        if shown % 100 == 0:  # a scrape every 100 refreshes
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read()
        if shown == WARMUP:
            start = rss_mib()
            print(f"after {WARMUP} warm-up refreshes: RSS {start:.1f} MiB", flush=True)
        elif shown > WARMUP and (shown - WARMUP) % 1000 == 0:
            print(f"  {shown - WARMUP:6d} refreshes: RSS {rss_mib():.1f} MiB", flush=True)

    with nvml.nvml_session() as session, status.exports(options) as sinks:
        status.watch(session, None, show, 0.0, WARMUP + refreshes, sinks)
    end = rss_mib()
    print(
        f"{refreshes} refreshes ({received[0]} datagrams received):"
        f" RSS {start:.1f} -> {end:.1f} MiB, ratio {end / start:.3f} (target <= 1.1)"
    )
    if shown != WARMUP + refreshes:
        sys.exit("bench: some refreshes were not shown")


if __name__ == "__main__":
    main()
