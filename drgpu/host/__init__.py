"""One adapter per outside world: NVML, the Docker engine, Compose, subprocesses, /proc
and the host lock. Only these modules import pynvml or subprocess, or speak to the engine."""
