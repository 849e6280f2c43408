"""Real metrics servers for the exporters' tests, on free loopback ports with their data
in a temporary folder: Debian's InfluxDB 1.x (HTTP API and a UDP listener) and Prometheus
(scraping one target every second). scripts/setup-test installs both."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import docker_required

DATABASE = "drgpu"


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port nothing listens on at 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, kind) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _program(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        message = f"{name} is missing (scripts/setup-test installs it)"
        if docker_required():
            pytest.fail(message)
        pytest.skip(message)
    return found


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if check():
                return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


@contextlib.contextmanager
def _running(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        server = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield server
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


Attempt = Callable[[], tuple[list[str], str, int, Any]]


@contextlib.contextmanager
def _served(what: str, log: Path, attempt: Attempt) -> Iterator[Any]:
    """The server `attempt` sets up (its argv, a URL and the status it answers once serving,
    what to yield), waited for; set up again on fresh ports when another process took one
    between `free_port` and the server's bind (the suites run side by side)."""
    for _ in range(3):
        argv, url, status, served = attempt()
        with _running(argv, log) as server:
            if _answers(server, url, status, what):
                yield served
                return
        if b"address already in use" not in log.read_bytes():
            break
    raise AssertionError(f"{what} did not start: {log.read_text()[-500:]}")


def _answers(server: subprocess.Popen[bytes], url: str, status: int, what: str) -> bool:
    """Whether `url` answers `status` before `server` exits (within 60 s)."""
    deadline = time.monotonic() + 60
    while server.poll() is None:
        with contextlib.suppress(OSError):
            if urllib.request.urlopen(url, timeout=2).status == status:
                return True
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return False


@dataclass(frozen=True)
class Influx:
    """A running InfluxDB: its HTTP API and its UDP listener (database `drgpu`)."""

    http_port: int
    udp_port: int

    @property
    def write_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/write?db={DATABASE}"

    def query(self, text: str) -> list[dict[str, Any]]:
        """InfluxQL over HTTP /query: the series of the first statement's result."""
        url = f"http://127.0.0.1:{self.http_port}/query?" + urllib.parse.urlencode(
            {"db": DATABASE, "q": text}
        )
        result = get_json(url)["results"][0]
        assert "error" not in result, result
        series: list[dict[str, Any]] = result.get("series", [])
        return series

    def rows(self, text: str) -> list[dict[str, Any]]:
        """Each row of each series as a mapping (the series' tags included)."""
        return [
            {**series.get("tags", {}), **dict(zip(series["columns"], values, strict=True))}
            for series in self.query(text)
            for values in series["values"]
        ]


@contextlib.contextmanager
def influxdb(folder: Path) -> Iterator[Influx]:
    """influxd with its own config: HTTP and UDP on free loopback ports, data in `folder`,
    no usage reporting, and the UDP listener flushing every 100 ms."""
    influxd = _program("influxd")
    config = folder / "influxdb.conf"

    def attempt() -> tuple[list[str], str, int, Influx]:
        http, udp, rpc = free_port(), free_port(socket.SOCK_DGRAM), free_port()
        config.write_text(
            f"""reporting-disabled = true
bind-address = "127.0.0.1:{rpc}"
[meta]
  dir = "{folder}/meta"
[data]
  dir = "{folder}/data"
  wal-dir = "{folder}/wal"
  query-log-enabled = false
[monitor]
  store-enabled = false
[http]
  bind-address = "127.0.0.1:{http}"
  log-enabled = false
[[udp]]
  enabled = true
  bind-address = "127.0.0.1:{udp}"
  database = "{DATABASE}"
  batch-size = 100
  batch-timeout = "100ms"
"""
        )
        argv = [influxd, "-config", str(config)]
        return argv, f"http://127.0.0.1:{http}/ping", 204, Influx(http, udp)

    with _served("influxd", folder / "influxd.log", attempt) as influx:
        create = urllib.parse.urlencode({"q": f"CREATE DATABASE {DATABASE}"}).encode()
        query = f"http://127.0.0.1:{influx.http_port}/query"
        urllib.request.urlopen(query, data=create, timeout=10).read()
        yield influx


@dataclass(frozen=True)
class Prometheus:
    """A running Prometheus scraping one target every second."""

    port: int

    def query(self, text: str) -> list[dict[str, Any]]:
        """The instant vector of a PromQL query (/api/v1/query)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": text}
        )
        answer = get_json(url)
        assert answer["status"] == "success", answer
        found: list[dict[str, Any]] = answer["data"]["result"]
        return found


@contextlib.contextmanager
def prometheus(folder: Path, target: str) -> Iterator[Prometheus]:
    """prometheus with its own config scraping `target` (HOST:PORT) every second."""
    program = _program("prometheus")
    config = folder / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: drgpu\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )

    def attempt() -> tuple[list[str], str, int, Prometheus]:
        port = free_port()
        argv = [
            program,
            f"--config.file={config}",
            f"--storage.tsdb.path={folder / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        return argv, f"http://127.0.0.1:{port}/-/ready", 200, Prometheus(port)

    with _served("prometheus", folder / "prometheus.log", attempt) as server:
        yield server
