"""`drgpu status --watch` against nvitop's monitor, kept open on the same box: CPU time per
tick, as a ratio measured in one run.

    .venv/bin/python bench/bench_watch.py [--rounds N] [--interval S] [--window S]

The box: a private engine (scripts/testbed) with 20 sleeping containers of the test image
labelled as one drgpu run, and a fake NVML (the bed's) with 8 GPUs whose process lists
hold those containers' host PIDs. Each monitor runs in its own pseudo-terminal (200x60)
at the same refresh interval; after a warm-up, the CPU time its process spends in a
window (utime + stime, every thread) is divided by the ticks in that window
(window / interval). Rounds alternate the two; the medians are compared.

A third monitor is drgpu with its exporters on (`--influx udp://...` to a socket of this
process, `--prometheus` scraped by this process every `--scrape-every` seconds, default 5:
the scrape interval docs/metrics.md shows; Prometheus's own default is 60, a common one 15).

Inputs (issue 13): drgpu's CPU time per tick no more than nvitop's (ratio <= 1).
Inputs (issue 22): with the exporters on, within 1.2x of off, and both under nvitop's.
Inputs (issue 30): with faults and cost on (always, in a watch: the health fields are read
every refresh, NVML's events followed, the ledger charged), at most 0.4x nvitop's.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import pty
import signal
import socket
import statistics
import struct
import subprocess
import sys
import termios
import threading
import time
import urllib.request
from pathlib import Path

from bed import BIN, IMAGE, private_engine, run

GPUS = 8
CONTAINERS = 20
RUN_ID = "bench"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def uuid(index: int) -> str:
    return f"GPU-{index:08x}-0000-4000-8000-{index:012x}"


def topology(pids: list[int]) -> dict[str, object]:
    """8 GPUs; container i's PID on GPU i % 8."""
    return {
        "driver_version": "550.54.14",
        "cuda_driver_version": 12040,
        "gpus": [
            {
                "uuid": uuid(index),
                "name": "NVIDIA L4" if index else "Tesla M40 24GB",
                "pci_bus_id": f"00000000:{16 * index + 3:02x}:00.0",
                "memory_total_mib": 23034,
                "memory_used_mib": 2048 + 512 * index,
                "utilization_gpu_percent": 10 * index,
                "compute_capability": [8, 9],
                "energy_mj": 10**9 * index,  # faults and cost read these each refresh
                "throttle_reasons": 0x1 if index % 2 else 0x4,  # idle, power cap: no fault
                "ecc_uncorrected": 0,
                "processes": [
                    {"pid": pid, "used_memory_mib": 512, "name": "sleep"}
                    for number, pid in enumerate(pids)
                    if number % GPUS == index
                ],
            }
            for index in range(GPUS)
        ],
    }


def start_containers(docker: list[str], env: dict[str, str]) -> list[int]:
    """20 sleeping containers labelled as services of run `bench`; their host PIDs."""
    ids = []
    for number in range(CONTAINERS):
        role, service = ("trainer", "sagemaker") if number == 0 else ("simulator", "robomaker")
        labels = {
            "drgpu.run_id": RUN_ID,
            "drgpu.gpus": uuid(number % GPUS),
            "drgpu.role": role,
            "com.docker.compose.project": f"deepracer-{RUN_ID}",
            "com.docker.compose.service": service if number < 2 else f"robomaker-{number}",
        }
        flags = [arg for key, value in labels.items() for arg in ("--label", f"{key}={value}")]
        ids.append(
            run(
                [*docker, "run", "-d", "--network", "none", *flags, IMAGE, "sleep", "infinity"],
                env,
            ).strip()
        )
    inspected = json.loads(run([*docker, "inspect", *ids], env))
    return [int(container["State"]["Pid"]) for container in inspected]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A loopback port nothing uses now."""
    with socket.socket(socket.AF_INET, kind) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def udp_sink(port: int) -> None:
    """Receive (and drop) what is sent to this UDP port, as Telegraf would, until exit."""
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", port))

    def drain() -> None:
        while receiver.recv(65536):
            pass

    threading.Thread(target=drain, daemon=True).start()


def scraper(port: int, every_s: float = 1.0) -> None:
    """Scrape http://127.0.0.1:PORT/metrics every `every_s`, as Prometheus would, until exit."""

    def scrape() -> None:
        while True:
            time.sleep(every_s)
            with contextlib.suppress(OSError):  # not serving yet, or between two runs
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()

    threading.Thread(target=scrape, daemon=True).start()


def cpu_per_tick(argv: list[str], env: dict[str, str], args: argparse.Namespace) -> float:
    """Run a monitor in a 200x60 pseudo-terminal; its CPU seconds per tick in the window."""
    main_fd, child_fd = pty.openpty()
    fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 200, 0, 0))
    process = subprocess.Popen(
        argv,
        stdin=child_fd,
        stdout=child_fd,
        stderr=child_fd,
        env={**env, "TERM": "xterm-256color", "COLUMNS": "200", "LINES": "60"},
        start_new_session=True,
    )
    os.close(child_fd)

    def drain() -> None:  # a full pty buffer would stall the monitor
        try:
            while os.read(main_fd, 65536):
                pass
        except OSError:
            pass

    threading.Thread(target=drain, daemon=True).start()
    try:
        time.sleep(args.warmup)
        if process.poll() is not None:
            sys.exit(f"bench: {argv[0]} ended early with {process.returncode}")
        before = cpu_seconds(process.pid)
        time.sleep(args.window)
        spent = cpu_seconds(process.pid) - before
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        os.close(main_fd)
    ticks: float = args.window / args.interval
    return spent / ticks


def main() -> None:
    """Start the box, measure both monitors alternately, print the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between ticks")
    parser.add_argument("--window", type=float, default=10.0, help="seconds measured per run")
    parser.add_argument("--warmup", type=float, default=4.0, help="seconds before measuring")
    parser.add_argument("--scrape-every", type=float, default=5.0, help="seconds between scrapes")
    args = parser.parse_args()
    nvitop = BIN / "nvitop"
    if not nvitop.is_file():
        sys.exit("bench: nvitop is missing (scripts/setup-test installs the test extra)")
    with private_engine() as bed:
        env = bed.env()
        pids = start_containers(["docker"], env)
        bed.set_topology(topology(pids))
        seen = json.loads(run([str(BIN / "drgpu"), "status", "--json"], env))
        once = run([str(nvitop), "--once"], env)
        print(
            f"box: {len(seen['gpus'])} GPUs, {len(seen['processes'])} GPU processes in"
            f" {sum(len(s) for r in seen['runs'] for s in r['services'].values())} drgpu"
            f" containers; nvitop --once lists {sum(str(pid) in once for pid in pids)} of them"
        )
        every = f"{args.interval}"
        influx, prometheus = free_port(socket.SOCK_DGRAM), free_port()
        udp_sink(influx)
        scraper(prometheus, args.scrape_every)
        drgpu = [str(BIN / "drgpu"), "status", "--watch", "--interval", every]
        exporting = ["--influx", f"udp://127.0.0.1:{influx}", "--prometheus", str(prometheus)]
        monitors = {
            "drgpu": drgpu,
            "drgpu+exp": [*drgpu, *exporting],
            "nvitop": [str(nvitop), "--interval", every],
        }
        samples: dict[str, list[float]] = {name: [] for name in monitors}
        for _ in range(args.rounds):  # alternated, so that drift hits both alike
            for name, argv in monitors.items():
                samples[name].append(cpu_per_tick(argv, env, args))
    drgpu_tick, exporting_tick, nvitop_tick = (
        statistics.median(samples[name]) for name in monitors
    )
    print(
        f"rounds: {args.rounds}, interval {args.interval:g} s, window {args.window:g} s"
        f" ({args.window / args.interval:g} ticks), medians"
    )
    for name, ticks in samples.items():
        print(f"  {name:9s} CPU ms per tick: " + ", ".join(f"{v * 1000:.1f}" for v in ticks))
    print(
        f"drgpu status --watch {drgpu_tick * 1000:6.1f} ms | nvitop {nvitop_tick * 1000:6.1f} ms"
        f" CPU per tick | ratio {drgpu_tick / nvitop_tick:.2f}x (target <= 0.4x)"
    )
    print(
        f"with --influx and --prometheus (scraped every {args.scrape_every:g} s)"
        f" {exporting_tick * 1000:6.1f} ms CPU per tick | ratio"
        f" {exporting_tick / drgpu_tick:.2f}x of off (target <= 1.2x),"
        f" {exporting_tick / nvitop_tick:.2f}x of nvitop (target <= 1x)"
    )


if __name__ == "__main__":
    main()
