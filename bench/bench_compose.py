"""drgpu against bare Compose on the same stack, as ratios measured in one run.

    .venv/bin/python bench/bench_compose.py [--runs N]

- render: median of `drgpu render` (over the fake NVML) against `docker compose config`.
- up:     median of `drgpu up` (render, compose up -d, verify over the engine's API)
          against a bare `docker compose up -d` of the same files, each followed by an
          untimed `down`.

Targets: render at most 2.5x compose config (issue 26); up at most 1.15x bare compose up.
Beside the ratio, what up adds beyond the verification's 0.25 s settle: up's median minus
bare compose up's, minus the settle (target under 0.15 s, issues 18 and 26).
It starts its own private engine with scripts/testbed (see docs/testing.md) and stops it after.
"""

from __future__ import annotations

import argparse

from bed import BIN, IMAGE, beyond_the_settle, interleaved_medians, private_engine, run

TOPOLOGY = {
    "gpus": [
        {
            "uuid": "GPU-0a2b4c6d-0000-4000-8000-000000000001",
            "name": "NVIDIA GeForce GTX 1650",
            "pci_bus_id": "00000000:03:00.0",
            "memory_total_mib": 4096,
            "compute_capability": [7, 5],
        },
        {
            "uuid": "GPU-1d3c5b7a-0000-4000-8000-000000000002",
            "name": "Tesla M40 24GB",
            "pci_bus_id": "00000000:81:00.0",
            "memory_total_mib": 22912,
            "compute_capability": [5, 2],
        },
    ]
}
STACK = f"""\
services:
  sagemaker:
    image: {IMAGE}
    pull_policy: never
    network_mode: none
    init: true
    command: ["sleep", "infinity"]
    environment:
      CUDA_VISIBLE_DEVICES: ${{DR_SAGEMAKER_CUDA_DEVICES}}
  robomaker:
    image: {IMAGE}
    pull_policy: never
    network_mode: none
    init: true
    command: ["sleep", "infinity"]
    environment:
      CUDA_VISIBLE_DEVICES: ${{DR_ROBOMAKER_CUDA_DEVICES}}
"""
SETTINGS = "DR_RUN_ID=bench\nDR_SAGEMAKER_CUDA_DEVICES=1\nDR_ROBOMAKER_CUDA_DEVICES=0\n"


def main() -> None:
    """Start an engine, measure both pairs alternately, print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    runs = parser.parse_args().runs
    with private_engine() as bed:
        bed.set_topology(TOPOLOGY)
        work = bed.dir / "stack"
        work.mkdir()
        (work / "stack.yml").write_text(STACK)
        (work / "system.env").write_text(SETTINGS)
        compose = str(BIN / "docker-compose")
        env = bed.env(
            DRGPU_COMPOSE=compose, DR_SAGEMAKER_CUDA_DEVICES="1", DR_ROBOMAKER_CUDA_DEVICES="0"
        )
        drgpu = [str(BIN / "drgpu")]
        files = ["-f", str(work / "stack.yml")]
        settings = ["--env-file", str(work / "system.env")]
        override = work / ".drgpu" / "deepracer-bench.override.yml"
        bare = [compose, "-p", "deepracer-bench", *files, "-f", str(override)]

        def nothing() -> None:
            return None

        def down() -> None:
            run([*bare, "down", "--remove-orphans", "-t", "0"], env)

        run([*drgpu, "render", *settings, *files, "-o", str(override)], env)  # warm caches
        pairs = {
            "render": (lambda: run([*drgpu, "render", *settings, *files], env), nothing),
            "config": (lambda: run([compose, *files, "config"], env), nothing),
            "up": (lambda: run([*drgpu, "up", *settings, *files], env), down),
            "bare_up": (lambda: run([*bare, "up", "-d"], env), down),
        }
        medians = interleaved_medians(pairs, runs)
    render, config, up, bare_up = (medians[name] for name in pairs)
    print(f"runs per command: {runs} (medians)")
    print(
        f"drgpu render {render * 1000:7.1f} ms | compose config {config * 1000:7.1f} ms"
        f" | ratio {render / config:.2f}x (target <= 2.5x)"
    )
    print(
        f"drgpu up     {up * 1000:7.1f} ms | compose up -d  {bare_up * 1000:7.1f} ms"
        f" | ratio {up / bare_up:.2f}x (target <= 1.15x) | {beyond_the_settle(up, bare_up)}"
    )


if __name__ == "__main__":
    main()
