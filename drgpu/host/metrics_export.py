"""Where `drgpu status --watch` sends core.metrics' series: InfluxDB line protocol over UDP
or HTTP, and a Prometheus `/metrics` endpoint (prometheus-client, imported only then)."""

from __future__ import annotations

import collections
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from drgpu.core.metrics import InfluxTarget, Metric, Sample
from drgpu.errors import ConfigError, DrgpuError

DATAGRAM_BYTES = 1400  # a UDP datagram that crosses any network unfragmented
HTTP_TIMEOUT_S = 2.0  # the whole of one HTTP write: connecting, sending, the answer
ANSWER_BYTES = 4096  # what is read of an HTTP answer
QUEUED = 8  # refreshes waiting to be written; beyond, the oldest is dropped (counted)
SCRAPERS = 16
SCRAPE_TIMEOUT_S = 10.0


class ExportError(DrgpuError):
    """A refresh's series could not be sent (the watch goes on)."""


class InfluxSender:
    """Sends line protocol to one InfluxDB receiver from a thread of its own (a slow receiver
    never holds the watch); each write's failure goes to `failed`, its success to `worked`,
    refreshes dropped while QUEUED wait are counted to `warn`."""

    def __init__(
        self,
        target: InfluxTarget,
        failed: Callable[[str], None],
        worked: Callable[[], None],
        warn: Callable[[str], None],
    ) -> None:
        self.target = target
        self._failed, self._worked, self._warn = failed, worked, warn
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
        self._waiting: collections.deque[Sequence[str] | None] = collections.deque()
        self._ready = threading.Condition()
        self._dropped = 0
        self._thread = threading.Thread(target=self._write_all, name="influx", daemon=True)
        self._thread.start()

    def send(self, lines: Sequence[str]) -> None:
        """Write one refresh's lines soon (the oldest waiting is dropped when QUEUED wait)."""
        with self._ready:
            if len(self._waiting) >= QUEUED:
                self._waiting.popleft()
                self._dropped += 1
            self._waiting.append(lines)
            self._ready.notify()

    def _write_all(self) -> None:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: bool(self._waiting))
                lines, dropped, self._dropped = self._waiting.popleft(), self._dropped, 0
            if dropped:
                self._warn(
                    f"--influx {self.target.url}: {dropped} refresh(es) not written:"
                    " the receiver is slower than the watch"
                )
            if lines is None:
                return
            try:
                self.write(lines)
            except ExportError as exc:
                self._failed(exc.message)
            else:
                self._worked()

    def write(self, lines: Sequence[str]) -> None:
        """Send these lines now (ExportError when the receiver cannot be reached)."""
        if not lines:
            return
        try:
            if self._socket is not None:
                for datagram in datagrams(lines):
                    self._socket.sendto(datagram, self._address)
            else:
                self._post(("\n".join(lines) + "\n").encode())
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise ExportError(f"cannot send to {self.target.url}: {reason}") from None

    def _post(self, body: bytes) -> None:
        """One POST, its answer read until its status line (a refusal: its first bytes)."""
        target, deadline = self.target, time.monotonic() + HTTP_TIMEOUT_S
        host = f"[{target.host}]" if ":" in target.host else target.host
        head = (
            f"POST {target.path} HTTP/1.1\r\nHost: {host}:{target.port}\r\n"
            "Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        sock = socket.create_connection((target.host, target.port), HTTP_TIMEOUT_S)
        if target.scheme == "https":
            import ssl  # lazy: only an HTTPS receiver needs it

            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=target.host)
        with sock:
            sock.sendall(head.encode() + body)
            answer = b""
            while len(answer) < ANSWER_BYTES and (left := deadline - time.monotonic()) > 0:
                sock.settimeout(left)
                chunk = sock.recv(ANSWER_BYTES)
                answer += chunk
                if not chunk or (b"\r\n" in answer and answer[9:10] == b"2"):
                    break
        status, _, rest = answer.decode("utf-8", "replace").partition("\r\n")
        if not status.startswith("HTTP/") or status[9:10] != "2":
            code = (
                status[9:] if status.startswith("HTTP/") else f"no answer in {HTTP_TIMEOUT_S:g} s"
            )
            said = rest.partition("\r\n\r\n")[2].strip()[:200]
            raise ExportError(f"{target.url} refused the points: {code} {said}".rstrip())

    def close(self) -> None:
        """Write what waits (a little while), then release the socket."""
        with self._ready:
            self._waiting.append(None)
            self._ready.notify()
        self._thread.join(timeout=HTTP_TIMEOUT_S * 2)
        if self._socket is not None:
            self._socket.close()


def datagrams(lines: Sequence[str]) -> Iterator[bytes]:
    """The lines in datagrams of at most DATAGRAM_BYTES cut at line ends (a longer line alone)."""
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
    """`/metrics` on ADDRESS:PORT: the last refresh's samples (no process or platform
    collectors), to at most SCRAPERS connections at once, each closed SCRAPE_TIMEOUT_S idle."""

    def __init__(self, host: str, port: int) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # lazy: --prometheus

        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        self._samples: tuple[Sample, ...] = ()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)  # a collector is anything with collect()
        slots = threading.BoundedSemaphore(SCRAPERS)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def process_request(self, request: Any, client_address: Any) -> None:
                if slots.acquire(blocking=False):
                    super().process_request(request, client_address)
                else:
                    self.shutdown_request(request)  # SCRAPERS already served

            def process_request_thread(self, request: Any, client_address: Any) -> None:
                try:
                    super().process_request_thread(request, client_address)
                finally:
                    slots.release()

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that broke its request or went away

        class Scrape(BaseHTTPRequestHandler):
            timeout = SCRAPE_TIMEOUT_S

            def do_GET(self) -> None:  # any GET: the Accept header is not read
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # no line per scrape on the watch's terminal

        try:
            Server.address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
            self._server = Server((host, port), Scrape)
        except OSError as exc:
            raise ConfigError(
                f"--prometheus {host}:{port}: cannot listen there: {exc.strerror or exc}"
            ) from None
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.port = int(self._server.server_address[1])

    def publish(self, found: Sequence[Sample]) -> None:
        """Serve these samples from now on (one assignment: a scrape sees old or new)."""
        self._samples = tuple(found)

    def collect(self) -> Iterator[Any]:
        """prometheus-client's collector call: one gauge family per metric."""
        from prometheus_client.core import GaugeMetricFamily  # lazy: only --prometheus needs it

        by_metric: dict[Metric, list[Sample]] = {}
        for sample in self._samples:
            by_metric.setdefault(sample.metric, []).append(sample)
        for metric, mine in by_metric.items():
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
