"""Where `drgpu status --watch` sends its series: InfluxDB line protocol over UDP or HTTP
(`InfluxSender`), and a Prometheus `/metrics` endpoint (`PrometheusEndpoint`, through
prometheus-client, imported only then). The series are core.metrics'.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from drgpu.core.metrics import METRICS, InfluxTarget, Sample
from drgpu.errors import ConfigError, DrgpuError

if TYPE_CHECKING:
    from collections.abc import Iterator

DATAGRAM_BYTES = 1400  # a UDP datagram that crosses any network unfragmented
HTTP_TIMEOUT_S = 2.0


class ExportError(DrgpuError):
    """A refresh's series could not be sent (the watch goes on)."""


class InfluxSender:
    """Sends line protocol to one InfluxDB receiver: UDP datagrams cut at line ends, or
    one HTTP POST per refresh."""

    def __init__(self, target: InfluxTarget) -> None:
        self.target = target
        self._socket: socket.socket | None = None
        self._address: Any = None
        if target.scheme == "udp":
            try:
                family, kind, proto, _name, address = socket.getaddrinfo(
                    target.host, target.port, type=socket.SOCK_DGRAM
                )[0]
            except OSError as exc:
                raise ConfigError(f"--influx {target.url}: {exc.strerror or exc}") from None
            self._socket = socket.socket(family, kind, proto)
            self._address = address

    def send(self, lines: Sequence[str]) -> None:
        """Send one refresh's lines (ExportError when the receiver cannot be reached)."""
        if not lines:
            return
        try:
            if self._socket is not None:
                for datagram in datagrams(lines):
                    self._socket.sendto(datagram, self._address)
            else:
                self._post(("\n".join(lines) + "\n").encode())
        except OSError as exc:
            reason = getattr(exc, "reason", None) or exc.strerror or exc
            raise ExportError(f"cannot send to {self.target.url}: {reason}") from None

    def _post(self, body: bytes) -> None:
        import urllib.error  # lazy: only an HTTP receiver needs it
        import urllib.request

        request = urllib.request.Request(self.target.url, data=body, method="POST")
        request.add_header("Content-Type", "text/plain; charset=utf-8")
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
                answer.read()
        except urllib.error.HTTPError as exc:
            said = exc.read().decode("utf-8", "replace").strip()[:200]
            raise ExportError(f"{self.target.url} refused the points: {exc.code} {said}") from None

    def close(self) -> None:
        """Release the socket."""
        if self._socket is not None:
            self._socket.close()


def datagrams(lines: Sequence[str]) -> Iterator[bytes]:
    """The lines packed into datagrams of at most DATAGRAM_BYTES, cut only at line ends (a
    longer line goes alone)."""
    packet = b""
    for line in lines:
        data = line.encode() + b"\n"
        if packet and len(packet) + len(data) > DATAGRAM_BYTES:
            yield packet
            packet = b""
        packet += data
    if packet:
        yield packet


class PrometheusEndpoint:
    """`/metrics` in Prometheus's text format on ADDRESS:PORT, serving the last refresh's
    samples (a registry of its own: no process or platform collectors)."""

    def __init__(self, host: str, port: int) -> None:
        from prometheus_client import CollectorRegistry, start_http_server  # lazy: --prometheus

        self._lock = threading.Lock()
        self._samples: tuple[Sample, ...] = ()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)  # a collector is anything with collect()
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise ConfigError(
                f"--prometheus {host}:{port}: cannot listen there: {exc.strerror or exc}"
            ) from None
        self.port = int(self._server.server_address[1])

    def publish(self, found: Sequence[Sample]) -> None:
        """Serve these samples from now on."""
        with self._lock:
            self._samples = tuple(found)

    def collect(self) -> Iterator[Any]:
        """prometheus-client's collector call: one gauge family per metric."""
        from prometheus_client.core import GaugeMetricFamily  # lazy: only --prometheus needs it

        with self._lock:
            found = self._samples
        by_metric: dict[str, list[Sample]] = {}
        for sample in found:
            by_metric.setdefault(sample.metric.name, []).append(sample)
        for metric in METRICS:
            mine = by_metric.get(metric.name)
            if not mine:
                continue
            names = [name for name, _ in mine[0].labels]
            family = GaugeMetricFamily(metric.name, metric.help, labels=names)
            for sample in mine:
                family.add_metric([value for _, value in sample.labels], sample.value)
            yield family

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
