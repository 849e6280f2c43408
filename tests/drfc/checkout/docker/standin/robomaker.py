"""robomaker stand-in: what the simapp image does with ROBOMAKER_COMMAND, shown, not run.

Exits 1 at once when the command is empty (the simapp image has nothing to run then);
else prints the command and the settings it would run with, and keeps running.
"""

import os
import signal
import sys
import time

SHOWN = ("WORLD_NAME", "S3_YAML_NAME", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if not command.strip():
        print("robomaker: ROBOMAKER_COMMAND is empty: nothing to run", file=sys.stderr)
        return 1
    print(f"robomaker: would run {command!r}")
    for key in SHOWN:
        print(f"robomaker: {key}={os.environ.get(key, '<unset>')}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
