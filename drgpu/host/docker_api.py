"""The one way to the Docker engine: its HTTP API, spoken directly (HTTP/1.1, kept alive)
on the unix socket DOCKER_HOST names (else /var/run/docker.sock), or on a `tcp://` host,
with TLS when DOCKER_TLS_VERIFY or DOCKER_CERT_PATH is set (`engine_address`). Docker
contexts (DOCKER_CONTEXT, `docker context use`) are not read; `ssh://` and other hosts
are refused with a sentence. No SDK: it takes longer to import than `drgpu down` may
take in all.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from drgpu.core.numbers import whole_number
from drgpu.errors import DockerError
from drgpu.host import trace

if TYPE_CHECKING:
    import ssl

TIMEOUT_S = 60.0
_UNREACHABLE_HINT = "is dockerd running, and DOCKER_HOST right?"


@dataclass(frozen=True)
class Address:
    """Where the engine listens: a unix socket path, or a TCP host and port (with TLS)."""

    socket_path: str | None = None
    host: str = ""
    port: int = 0
    tls: bool = False
    tls_verify: bool = False
    cert_dir: str = ""

    def __str__(self) -> str:
        return self.socket_path or f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"


def engine_address(environment: Mapping[str, str]) -> Address:
    """The engine DOCKER_HOST names: `unix://PATH` or a bare `/PATH` (a socket), or
    `tcp://HOST[:PORT]` (port 2376 with TLS, else 2375; a path after it is ignored); unset,
    the local socket. TLS is on when DOCKER_TLS_VERIFY or DOCKER_CERT_PATH is non-empty."""
    host = environment.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if host.startswith("unix://"):
        return Address(socket_path=host.removeprefix("unix://"))
    if host.startswith("/"):
        return Address(socket_path=host)
    if not host.startswith("tcp://"):
        scheme = host.partition("://")[0] if "://" in host else host
        raise DockerError(
            f"DOCKER_HOST {scheme}:// is not supported: drgpu speaks to unix:// and tcp:// hosts",
            hint="forward the remote socket (`ssh -NL /tmp/docker.sock:/var/run/docker.sock"
            " HOST`) and set DOCKER_HOST=unix:///tmp/docker.sock",
        )
    name, _, port = host.removeprefix("tcp://").partition("/")[0].rpartition(":")
    verify = bool(environment.get("DOCKER_TLS_VERIFY"))
    tls = verify or bool(environment.get("DOCKER_CERT_PATH"))
    if not name or whole_number(port, 0, 65535) is None:
        name, port = name or port, "2376" if tls else "2375"
    return Address(
        host=name.strip("[]"),
        port=int(port),
        tls=tls,
        tls_verify=verify,
        cert_dir=environment.get("DOCKER_CERT_PATH") or os.path.expanduser("~/.docker"),
    )


@dataclass(frozen=True)
class Answer:
    """The engine's answer to one call."""

    status: int
    body: bytes

    def json(self) -> Any:
        """The body as JSON (None when empty or not JSON: an error answer's text)."""
        try:
            return json.loads(self.body) if self.body.strip() else None
        except ValueError:
            return None

    def checked(self, what: str, *ok: int) -> Any:
        """The JSON body when the status is one of `ok`, else the engine's refusal."""
        self.checked_body(what, *ok)
        return self.json()

    def checked_body(self, what: str, *ok: int) -> bytes:
        """The body when the status is one of `ok`, else the engine's refusal."""
        if self.status not in ok:
            raise DockerError(f"the Docker engine refused to {what}: {self.message()}")
        return self.body

    def message(self) -> str:
        """The engine's word in an error answer (else its status)."""
        answer = self.json()
        message = answer.get("message") if isinstance(answer, dict) else None
        return str(message or self.status)


class _Closed(Exception):
    """The engine closed a kept-alive connection before answering."""


class Connection:
    """One connection to the engine, kept open between calls (a live view calls every
    tick); opened again when the engine closed it meanwhile."""

    def __init__(self, address: Address) -> None:
        self._address = address
        self._socket: socket.socket | None = None
        self._reader: IO[bytes] | None = None

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        data: bytes | None = None,
        timeout_s: float = TIMEOUT_S,
    ) -> Answer:
        """One API call: `body` sent as JSON, or `data` (a tar archive) as it is."""
        payload = data if data is not None else b"" if body is None else json.dumps(body).encode()
        content_type = "application/x-tar" if data is not None else "application/json"
        started = time.monotonic()
        try:
            answer = self._exchange(method, path, payload, content_type, timeout_s)
        except OSError as exc:
            self.close()
            _log_call(method, path, f"failed ({exc})", started)
            if isinstance(exc, TimeoutError):
                raise DockerError(
                    f"the Docker engine did not answer {method} {path.partition('?')[0]}"
                    f" within {timeout_s:.0f}s"
                ) from None
            raise DockerError(
                f"cannot reach the Docker engine at {self._address}: {exc.strerror or exc}",
                hint=_UNREACHABLE_HINT,
            ) from None
        _log_call(method, path, str(answer.status), started)
        return answer

    def close(self) -> None:
        """Close the connection (the next call opens another)."""
        if self._socket is not None:
            self._socket.close()
        self._socket = self._reader = None

    def _exchange(
        self, method: str, path: str, payload: bytes, content_type: str, timeout_s: float
    ) -> Answer:
        reused = self._socket is not None
        try:
            return self._send_and_read(method, path, payload, content_type, timeout_s)
        except (_Closed, ConnectionError):
            self.close()
            if not reused:  # a fresh connection that closes at once: the engine is not there
                raise ConnectionResetError("the engine closed the connection") from None
        return self._send_and_read(method, path, payload, content_type, timeout_s)

    def _send_and_read(
        self, method: str, path: str, payload: bytes, content_type: str, timeout_s: float
    ) -> Answer:
        if self._socket is None:
            self._socket = _connect(self._address)
            self._reader = self._socket.makefile("rb")
        assert self._reader is not None
        self._socket.settimeout(timeout_s)
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: docker\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        )
        self._socket.sendall(head.encode() + payload)
        status_line = self._reader.readline()
        if not status_line:
            raise _Closed
        try:
            status = int(status_line.split()[1])
        except (IndexError, ValueError):
            self.close()
            raise DockerError(
                f"the Docker engine answered {method} {path} with no status"
            ) from None
        headers = _headers(self._reader)
        bodiless = status in (204, 304) or method == "HEAD"
        body = b"" if bodiless else _body(self._reader, headers)
        to_the_end = not bodiless and "content-length" not in headers and not _chunked(headers)
        if to_the_end or headers.get("connection", "").lower() == "close":
            self.close()  # the body ran to the end of the connection, or the engine ends it
        return Answer(status, body)


def _log_call(method: str, path: str, outcome: str, started: float) -> None:
    """DRGPU_LOG: one API call, its outcome and duration."""
    if trace.enabled():
        took = (time.monotonic() - started) * 1000
        shown = urllib.parse.unquote(path)
        trace.debug(__name__, "%s %s: %s in %.3f ms", method, shown, outcome, took)


def _connect(address: Address) -> socket.socket:
    if address.socket_path is not None:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.settimeout(TIMEOUT_S)
            connection.connect(address.socket_path)
        except OSError:
            connection.close()
            raise
        return connection
    connection = socket.create_connection((address.host, address.port), timeout=TIMEOUT_S)
    if not address.tls:
        return connection
    try:
        return _tls_context(address).wrap_socket(connection, server_hostname=address.host)
    except OSError:
        connection.close()
        raise


def _tls_context(address: Address) -> ssl.SSLContext:
    """The TLS of a `tcp://` engine: the client certificate (cert.pem, key.pem) of the
    certificate folder (DOCKER_CERT_PATH, else ~/.docker) when there; the engine's
    certificate checked against that folder's ca.pem with DOCKER_TLS_VERIFY, else not."""
    import ssl  # only for a TLS engine: its import takes a while

    def cert_file(name: str) -> str:
        return os.path.join(address.cert_dir, name)

    if address.tls_verify:
        context = ssl.create_default_context(cafile=cert_file("ca.pem"))
    else:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if os.path.isfile(cert_file("cert.pem")):
        context.load_cert_chain(cert_file("cert.pem"), cert_file("key.pem"))
    return context


def _headers(reader: IO[bytes]) -> dict[str, str]:
    headers = {}
    while (line := reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers


def _chunked(headers: Mapping[str, str]) -> bool:
    return "chunked" in headers.get("transfer-encoding", "")


def _body(reader: IO[bytes], headers: Mapping[str, str]) -> bytes:
    if _chunked(headers):
        chunks = []
        while size := int(reader.readline().split(b";")[0].strip() or b"0", 16):
            chunks.append(reader.read(size))
            reader.readline()
        while reader.readline() not in (b"\r\n", b"\n", b""):  # trailers
            pass
        return b"".join(chunks)
    if "content-length" in headers:
        return reader.read(int(headers["content-length"]))
    return reader.read()


@contextmanager
def connected(environment: Mapping[str, str] | None = None) -> Iterator[Connection]:
    """A connection to the engine (DOCKER_HOST's), closed when the block ends."""
    connection = Connection(engine_address(os.environ if environment is None else environment))
    try:
        yield connection
    finally:
        connection.close()


def call(method: str, path: str, body: Any = None, *, data: bytes | None = None) -> Answer:
    """One API call on a connection of its own."""
    with connected() as connection:
        return connection.call(method, path, body, data=data)


def unframed(raw: bytes) -> bytes:
    """What a log or exec stream says, in order: the payloads of the engine's multiplexed
    frames (8 bytes of header: the stream, three zeros, the size, big-endian) when the
    container has no TTY, else the raw stream."""
    frames = _frames(raw)
    return raw if frames is None else b"".join(payload for _stream, payload in frames)


def _frames(raw: bytes) -> list[tuple[int, bytes]] | None:
    """The frames of a multiplexed stream, or None when `raw` is not one."""
    frames, at = [], 0
    while at < len(raw):
        head = raw[at : at + 8]
        if len(head) < 8 or head[0] > 2 or head[1:4] != b"\0\0\0":
            return None
        size = int.from_bytes(head[4:8], "big")
        if at + 8 + size > len(raw):
            return None
        frames.append((head[0], raw[at + 8 : at + 8 + size]))
        at += 8 + size
    return frames


def filters(wanted: Mapping[str, str]) -> str:
    """The engine's `filters` query value: each filter with its one value."""
    return urllib.parse.quote(json.dumps({key: [value] for key, value in wanted.items()}))
