"""The series `drgpu status --watch` exports (docs/metrics.md), from one snapshot. Pure:
drgpu/host/metrics_export sends them."""

from __future__ import annotations

import functools
import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

from drgpu.core.gpu_usage import Status
from drgpu.core.model import Gpu
from drgpu.errors import ConfigError

MIB = 1024 * 1024
Labels = tuple[tuple[str, str], ...]  # (name, value) pairs, in the metric's label order


@dataclass(frozen=True)
class Metric:
    """One exported quantity: its InfluxDB measurement and field, and its Prometheus name
    (`measurement_field` unless given); bytes and counts are InfluxDB integer fields."""

    measurement: str
    field: str
    help: str
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.name or f"{self.measurement}_{self.field}")

    @property
    def integer(self) -> bool:
        return self.field == "count" or "_bytes" in self.field


GPU, COST = "drgpu_gpu", "drgpu_cost"
GPU_UTILIZATION = Metric(GPU, "utilization_percent", "GPU utilisation (0-100)")
GPU_MEMORY_USED = Metric(GPU, "memory_used_bytes", "GPU memory used")
GPU_MEMORY_TOTAL = Metric(GPU, "memory_total_bytes", "GPU memory in all")
GPU_TEMPERATURE = Metric(GPU, "temperature_celsius", "GPU temperature")
GPU_POWER = Metric(GPU, "power_watts", "GPU power draw")
PROCESS_MEMORY = Metric(
    "drgpu_process", "memory_used_bytes", "GPU memory used by a service's processes on one GPU"
)
VIOLATIONS = Metric("drgpu_violations", "count", "Violations now, per kind", "drgpu_violations")
GPU_SECONDS = Metric(COST, "gpu_seconds", "Seconds a GPU was held")
ENERGY = Metric(COST, "energy_joules", "Energy of the GPUs held")
PEAK_MEMORY = Metric(COST, "peak_memory_bytes", "Peak GPU memory")
MEAN_UTILIZATION = Metric(COST, "utilization_percent", "Mean GPU utilisation")
THROTTLED = Metric(COST, "throttled_seconds", "Seconds the clocks were held down")


@dataclass(frozen=True)
class Sample:
    """One value of a metric, with its labels in the metric's label order."""

    metric: Metric
    labels: Labels
    value: float
    message: str = ""  # line protocol only: a string field `message` beside the value


def samples(status: Status) -> tuple[Sample, ...]:
    """Every sample of one snapshot: each GPU NVML can read (a lost GPU has none), each
    (run, service, role, GPU) with processes in a container, each (kind, run, service) of
    the violations."""
    gpus = [sample for gpu in status.inventory.gpus if not gpu.lost for sample in _gpu_samples(gpu)]
    return (*gpus, *_process_samples(status), *_violation_samples(status))


def _gpu_samples(gpu: Gpu) -> list[Sample]:
    tags = (("gpu_uuid", gpu.uuid), ("gpu_index", str(gpu.index)), ("gpu_name", gpu.name))
    values = (
        (GPU_UTILIZATION, gpu.utilization_gpu_percent),
        (GPU_MEMORY_USED, gpu.memory_used_mib * MIB if gpu.memory_total_mib else None),
        (GPU_MEMORY_TOTAL, gpu.memory_total_mib * MIB or None),  # 0: NVML could not tell
        (GPU_TEMPERATURE, gpu.temperature_c),
        (GPU_POWER, gpu.power_w),
    )
    return [Sample(metric, tags, float(value)) for metric, value in values if value is not None]


def _process_samples(status: Status) -> list[Sample]:
    """Memory per (run, service, role, GPU), summed over that service's processes there."""
    memory: dict[Labels, int] = {}
    for process in status.processes:
        if process.container is None:
            continue  # on the host: a violation (stray) or a display, not a container's
        key = (
            ("run", process.run_id or ""),
            ("service", process.service or process.container),
            ("role", process.role),
            ("gpu_uuid", process.gpu.uuid),
        )
        memory[key] = memory.get(key, 0) + process.used_memory_mib * MIB
    return [Sample(PROCESS_MEMORY, key, float(value)) for key, value in memory.items()]


def _violation_samples(status: Status) -> list[Sample]:
    counts: dict[Labels, tuple[int, str]] = {}
    for violation in status.violations:
        key = (
            ("kind", violation.kind),
            ("run", violation.facts.get("run_id") or ""),
            ("service", violation.facts.get("service") or ""),
        )
        n, first = counts.get(key, (0, violation.message))
        counts[key] = n + 1, first
    return [Sample(VIOLATIONS, key, float(n), first) for key, (n, first) in counts.items()]


# --- InfluxDB line protocol ----------------------------------------------------------

_TAG_SPECIALS = re.compile(r"([,= ])")


def escape_tag(text: str) -> str:
    """A tag key or value in line protocol, never empty where `text` is not: `,= ` escaped
    with a backslash; a backslash written U+29F5 (reverse solidus operator), and a control
    character (a line break, which line protocol cannot carry) visibly with it (`\u29f5n`)."""
    flat = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return _TAG_SPECIALS.sub(r"\\\1", flat.replace("\\", "\u29f5"))


def quote_field(text: str) -> str:
    """A string field value in line protocol: in double quotes, `"` and `\\` escaped."""
    flat = " ".join(text.splitlines())
    return '"' + flat.replace("\\", "\\\\").replace('"', '\\"') + '"'


def line_protocol(found: Iterable[Sample], time_ns: int) -> list[str]:
    """One line per measurement and tag set, its fields together (a violation's first
    message as the string field `message`), stamped `time_ns`; empty tag values left out."""
    points: dict[tuple[str, Labels], list[str]] = {}
    for sample in found:
        metric = sample.metric
        value = f"{round(sample.value)}i" if metric.integer else _float(sample.value)
        fields = points.setdefault((metric.measurement, sample.labels), [])
        fields.append(f"{metric.field}={value}")
        if sample.message:
            fields.append(f"message={quote_field(sample.message)}")
    return [
        f"{_series_key(measurement, tags)} {','.join(fields)} {time_ns}"
        for (measurement, tags), fields in points.items()
    ]


@functools.lru_cache(maxsize=4096)
def _series_key(measurement: str, tags: Labels) -> str:
    """`measurement,tag=value,...`, the tags escaped (cached: the same few every refresh)."""
    return measurement + "".join(f",{escape_tag(k)}={escape_tag(v)}" for k, v in tags if v)


def _float(value: float) -> str:
    """A float field: always with a decimal point, so InfluxDB keeps the field a float."""
    text = repr(float(value))
    return text if "." in text or "e" in text else f"{text}.0"


# --- Where the series go --------------------------------------------------------------


@dataclass(frozen=True)
class InfluxTarget:
    """An InfluxDB line-protocol receiver: UDP, or HTTP(S) `/write?db=NAME` (InfluxDB 1.x)."""

    scheme: str  # udp, http or https
    host: str
    port: int
    path: str = ""  # http(s): the path and query, e.g. /write?db=influx

    @property
    def url(self) -> str:
        """The URL as given back (a password in its query written `***`)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return redacted(f"{self.scheme}://{host}:{self.port}{self.path}")


_SECRET = re.compile(r"(?:(?<=//)|^)[^/?#\s]*@|(?<=[?&])(p|password|token)=[^&#]*", re.IGNORECASE)


def redacted(url: str) -> str:
    """`url` with its user and password, and a password in its query (`p=`), written `***`."""
    return _SECRET.sub(lambda m: f"{m[1]}=***" if m[1] else "***@", url)


def influx_target(text: str) -> InfluxTarget:
    """`udp://HOST:PORT` or `http(s)://HOST:PORT/write?db=NAME` (ConfigError otherwise)."""
    usage = "--influx takes udp://HOST:PORT or http(s)://HOST:PORT/write?db=NAME"
    shown = repr(redacted(text))
    try:
        url = urllib.parse.urlsplit(text.strip())
        port = url.port
    except ValueError as exc:
        raise ConfigError(f"--influx {shown}: {redacted(str(exc))}", hint=usage) from None
    if url.scheme not in ("udp", "http", "https") or not url.hostname or port is None:
        raise ConfigError(f"--influx {shown} is not a URL drgpu can send to", hint=usage)
    if url.username or url.password:
        raise ConfigError(
            "--influx: credentials in the URL are not taken (they would show in `ps`)",
            hint=usage,
        )
    if url.scheme == "udp":
        if url.path not in ("", "/") or url.query:
            raise ConfigError(f"--influx {shown}: a UDP URL has no path", hint=usage)
        return InfluxTarget("udp", url.hostname, port)
    database = urllib.parse.parse_qs(url.query).get("db", [""])[0]
    if url.path.rstrip("/") != "/write" or not database:
        raise ConfigError(f"--influx {shown}: an HTTP URL is .../write?db=NAME", hint=usage)
    return InfluxTarget(url.scheme, url.hostname, port, f"{url.path}?{url.query}")


EVERY_ADDRESS = ("0.0.0.0", "::")


def prometheus_address(text: str) -> tuple[str, int]:
    """Where `--prometheus` listens: `PORT` or `:PORT` is 127.0.0.1; `*` and `0` are 0.0.0.0."""
    usage = "--prometheus takes PORT, :PORT (127.0.0.1) or ADDRESS:PORT, e.g. 0.0.0.0:9400"
    host, _, port = text.strip().rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    host = "0.0.0.0" if host in ("*", "0") else host
    if (
        not (port.isascii() and port.isdigit() and 0 < int(port) < 65536)
        or not host.isprintable()
        or " " in host
    ):
        raise ConfigError(f"--prometheus {text!r} is no address and port", hint=usage)
    return host, int(port)
