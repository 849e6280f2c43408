"""The one way to the Docker engine: its HTTP API (HTTP/1.1, kept alive) on the unix socket or
`tcp://` host the docker CLI would choose (`engine_address`), which every program drgpu runs
is handed too (`program_environment`). Every answer is bounded (a total deadline, head and
body sizes); one that breaks HTTP is an error. No SDK: importing one takes longer than
`drgpu down` may take in all."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.parse
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drgpu.errors import ConfigError, DockerError
from drgpu.host import trace
from drgpu.host.files import optional_text

if TYPE_CHECKING:
    import ssl

TIMEOUT_S = 60.0
MAX_HEAD_BYTES = 64 * 1024  # an answer's status line and headers
MAX_BODY_BYTES = 64 * 1024 * 1024
MIN_API_VERSION = (1, 41)  # Docker 20.10
DEFAULT_SOCKET = "/var/run/docker.sock"
# The variables with which the docker CLI chooses its engine and TLS (besides config.json's
# context): drgpu sets or removes each for every program it runs.
ENGINE_KEYS: tuple[str, ...] = ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_TLS", "DOCKER_TLS_VERIFY")
ENGINE_KEYS += ("DOCKER_CERT_PATH",)
_settings: dict[str, str] = {}


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
        return self.socket_path or f"{'https' if self.tls else 'http'}://{self._place()}"

    def _place(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def exported(self) -> dict[str, str]:
        """The ENGINE_KEYS that point the docker CLI, Compose and DRfC's scripts here."""
        if self.socket_path is not None:
            return {"DOCKER_HOST": f"unix://{self.socket_path}"}
        tls = {"DOCKER_TLS": "1", "DOCKER_CERT_PATH": self.cert_dir} if self.tls else {}
        verify = {"DOCKER_TLS_VERIFY": "1"} if self.tls_verify else {}
        return {"DOCKER_HOST": f"tcp://{self._place()}", **tls, **verify}


def use_settings(values: Mapping[str, str]) -> None:
    """Let system.env's engine settings count over the environment, as for Compose."""
    _settings.clear()
    _settings.update({key: values[key] for key in ENGINE_KEYS if key in values})


def program_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """`environment` with system.env's engine settings on top (`use_settings`) pointed at its
    engine alone: DOCKER_HOST (and TLS) set, DOCKER_CONTEXT unset."""
    kept = {key: value for key, value in environment.items() if key not in ENGINE_KEYS}
    return kept | engine_address({**environment, **_settings}).exported()


def engine_address(environment: Mapping[str, str]) -> Address:
    """The engine the docker CLI picks, its flags aside: DOCKER_HOST if non-empty; else the
    context DOCKER_CONTEXT names, else config.json's currentContext (in DOCKER_CONFIG, else
    ~/.docker), but for "default"; else the local socket, or tcp://localhost:2376 with TLS.
    Outside a context, TLS is on when DOCKER_TLS or DOCKER_TLS_VERIFY is non-empty (verified
    with the latter), its certificates in DOCKER_CERT_PATH, else the config folder."""
    config_dir = environment.get("DOCKER_CONFIG") or os.path.expanduser("~/.docker")
    host = environment.get("DOCKER_HOST", "")
    if not host:
        name = environment.get("DOCKER_CONTEXT") or _json_of(
            Path(config_dir, "config.json"), "the docker config"
        ).get("currentContext")
        if isinstance(name, str) and name not in ("", "default"):
            return _context_address(config_dir, name)
    verify = bool(environment.get("DOCKER_TLS_VERIFY"))
    tls = verify or bool(environment.get("DOCKER_TLS"))
    cert_dir = environment.get("DOCKER_CERT_PATH") or config_dir
    host = host.strip() or ("tcp://localhost:2376" if tls else "")
    return _parsed_host(host, tls, verify, cert_dir)


def _parsed_host(text: str, tls: bool, verify: bool, cert_dir: str) -> Address:
    """A DOCKER_HOST (or context host): empty or `unix://` the local socket, `unix://PATH` a
    socket, `tcp://HOST[:PORT][/PATH]` or `HOST[:PORT]` a TCP host (localhost, port 2375 when
    left out, as for the CLI; `[::1]` is ::1), its path ignored; other schemes are refused."""
    text = text.strip()
    scheme, found, rest = text.partition("://")
    if not found:
        scheme, rest = ("tcp", text) if text else ("unix", "")
    if scheme == "unix" and "://" not in rest:
        return Address(socket_path=rest or DEFAULT_SOCKET)
    if scheme != "tcp" or "://" in rest:
        raise DockerError(
            f"DOCKER_HOST {scheme}:// is not supported: drgpu speaks to unix:// and tcp:// hosts",
            hint="forward the remote socket (`ssh -NL /tmp/docker.sock:/var/run/docker.sock"
            " HOST`) and set DOCKER_HOST=unix:///tmp/docker.sock",
        )
    place = urllib.parse.urlsplit(f"//{rest}")
    try:
        port = place.port or 2375
    except ValueError:
        raise DockerError(
            f"DOCKER_HOST {text!r}: the port is not a number from 1 to 65535"
        ) from None
    host = place.hostname or "localhost"
    return Address(host=host, port=port, tls=tls, tls_verify=verify, cert_dir=cert_dir)


def _json_of(path: Path, what: str) -> dict[str, Any]:
    """A JSON object file of the docker CLI ({} when there is none)."""
    try:
        text = optional_text(path)
        found = json.loads(text) if text is not None else {}
    except (ConfigError, ValueError) as exc:
        raise DockerError(f"{what} {path} {getattr(exc, 'message', 'is not JSON')}") from None
    return found if isinstance(found, dict) else {}


def _context_address(config_dir: str, name: str) -> Address:
    """Context `name`'s docker endpoint (contexts/meta/SHA256(name)/meta.json), read as the CLI
    does: TLS when it has a TLS folder (contexts/tls/SHA256(name)/docker) or skips verifying."""
    import hashlib  # lazy: only a context needs it, and its import takes a while

    digest = hashlib.sha256(name.encode()).hexdigest()
    meta = _json_of(Path(config_dir, "contexts", "meta", digest, "meta.json"), "docker context")
    if not meta:
        raise DockerError(
            f"docker context {name[:80]!r} does not exist",
            hint="`docker context ls` lists them; DOCKER_CONTEXT or `docker context use` names one",
        )
    endpoints = meta.get("Endpoints")
    endpoint = endpoints.get("docker") if isinstance(endpoints, dict) else None
    endpoint = endpoint if isinstance(endpoint, dict) else {}
    host, skip = str(endpoint.get("Host", "")), bool(endpoint.get("SkipTLSVerify"))
    tls_dir = os.path.join(config_dir, "contexts", "tls", digest, "docker")
    tls = skip or os.path.isdir(tls_dir)
    return _parsed_host(host, tls, tls and not skip, tls_dir)


@dataclass(frozen=True)
class Answer:
    """The engine's answer to one call."""

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)  # names in lower case

    def checked(self, what: str, *ok: int, kind: type = dict) -> Any:
        """The JSON body, a `kind` (None when empty and not a 200 or 201), when the status
        is one of `ok`, else the engine's refusal; any other body is an error."""
        body, needed = self.checked_body(what, *ok), self.status in (200, 201)
        try:
            found = json.loads(body) if body.strip() or needed else None
        except ValueError:
            found = body
        if (found is not None or needed) and not isinstance(found, kind):
            shape = "a JSON list" if kind is list else "a JSON object"
            raise DockerError(f"the Docker engine's answer to {what} is not {shape}")
        return found

    def created_id(self, what: str) -> str:
        """The Id of what a 201 answer created."""
        found = self.checked(what, 201).get("Id")
        if not isinstance(found, str) or not found:
            raise DockerError(f"the Docker engine's answer to {what} names no Id")
        return found

    def checked_body(self, what: str, *ok: int) -> bytes:
        """The body when the status is one of `ok`, else the engine's refusal."""
        if self.status not in ok:
            raise DockerError(f"the Docker engine refused to {what}: {self.message()}")
        return self.body

    def message(self) -> str:
        """The engine's word in an error answer (else its status)."""
        try:
            answer = json.loads(self.body) if self.body.strip() else None
        except ValueError:  # an error answer's text
            answer = None
        return str((answer.get("message") if isinstance(answer, dict) else None) or self.status)


class _Broken(Exception):
    """An answer that breaks HTTP (the sentence says how)."""


class Connection:
    """One connection to the engine, kept between calls (opened again if the engine closed it)."""

    def __init__(self, address: Address) -> None:
        self._address = address
        self._socket: socket.socket | None = None
        self._buffer = bytearray()
        self._deadline = 0.0

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        data: bytes | None = None,
        timeout_s: float | None = None,
    ) -> Answer:
        """One API call: `body` sent as JSON, or `data` (a tar archive) as is, in `timeout_s`."""
        payload = data if data is not None else b"" if body is None else json.dumps(body).encode()
        content_type = "application/x-tar" if data is not None else "application/json"
        request = f"{method} {path} HTTP/1.1\r\nHost: docker\r\nContent-Type: {content_type}\r\n"
        request += f"Content-Length: {len(payload)}\r\n\r\n"
        started, timeout_s = time.monotonic(), timeout_s or TIMEOUT_S
        self._deadline = started + timeout_s
        shown = f"{method} {path.partition('?')[0]}"
        try:
            answer = self._exchange(request.encode() + payload)
        except (OSError, _Broken) as exc:
            self.close()
            _log_call(method, path, f"failed ({exc})", started)
            if isinstance(exc, _Broken):
                raise DockerError(f"the Docker engine's answer to {shown} {exc}") from None
            if isinstance(exc, TimeoutError):
                raise DockerError(
                    f"the Docker engine did not answer {shown} within {timeout_s:.0f}s"
                ) from None
            raise DockerError(
                f"cannot reach the Docker engine at {self._address}: {exc.strerror or exc}",
                hint="is dockerd running, and DOCKER_HOST (or the docker context) right?",
            ) from None
        _log_call(method, path, str(answer.status), started)
        return answer

    def close(self) -> None:
        """Close the connection (the next call opens another)."""
        if self._socket is not None:
            self._socket.close()
        self._socket, self._buffer = None, bytearray()

    def _exchange(self, request: bytes) -> Answer:
        """Send `request`, read the answer; again on a new connection when the engine had closed
        the kept one (a new one that fails says why: refused, closed at once)."""
        reused = self._socket is not None
        try:
            return self._send_and_read(request)
        except ConnectionError:
            self.close()
            if reused:
                return self._exchange(request)
            raise

    def _send_and_read(self, request: bytes) -> Answer:
        if self._socket is None:
            self._socket = _connect(self._address, self._left())
        self._socket.settimeout(self._left())
        self._socket.sendall(request)
        if not self._fill(MAX_HEAD_BYTES, may_end=True):
            raise ConnectionResetError("the engine closed the connection")
        status_line, *lines = self._until(b"\r\n\r\n").split("\r\n")
        fields = (line.partition(":") for line in lines if line)
        headers = {name.strip().lower(): value.strip() for name, _, value in fields}
        try:
            status = int(status_line.split()[1])
        except (IndexError, ValueError):
            raise _Broken("has no status") from None
        _check_version(headers.get("api-version", ""))
        bodiless = status in (204, 304)
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        body = b"" if bodiless else self._body(headers, chunked)
        to_the_end = not bodiless and "content-length" not in headers and not chunked
        if to_the_end or headers.get("connection", "").lower() == "close":
            self.close()  # the body ran to the end of the connection, or the engine ends it
        return Answer(status, body, headers)

    def _left(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline")
        return left

    def _fill(self, limit: int, *, may_end: bool = False) -> bool:
        """Read more of the answer, up to `limit` bytes held; False when the engine closed the
        connection and the answer `may_end` there, else that is an answer that ended early."""
        assert self._socket is not None
        if len(self._buffer) >= limit:
            raise _Broken(f"is larger than the {limit >> 10} KiB drgpu takes")
        self._socket.settimeout(self._left())
        more = self._socket.recv(65536)
        if not more and not may_end:
            raise _Broken("ended early (the connection closed)")
        self._buffer += more
        return bool(more)

    def _take(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._fill(MAX_BODY_BYTES + MAX_HEAD_BYTES)
        taken = bytes(self._buffer[:size])
        del self._buffer[:size]
        return taken

    def _until(self, end: bytes) -> str:
        """The answer up to `end` (left out), within the head's bound."""
        while (at := self._buffer.find(end)) < 0:
            self._fill(MAX_HEAD_BYTES)
        return self._take(at + len(end))[: -len(end)].decode("latin-1")

    def _body(self, headers: Mapping[str, str], chunked: bool) -> bytes:
        if chunked:
            chunks, total = [], 0
            while True:
                try:
                    size = int(self._until(b"\n").split(";")[0].strip(), 16)
                except ValueError:
                    raise _Broken("has a malformed chunk size") from None
                if size == 0:
                    break
                total += size
                if total > MAX_BODY_BYTES:
                    raise _Broken(f"is larger than {MAX_BODY_BYTES >> 20} MiB")
                chunks.append(self._take(size))
                self._until(b"\n")
            while self._until(b"\n").rstrip("\r"):  # trailers
                pass
            return b"".join(chunks)
        if "content-length" in headers:
            length = headers["content-length"]
            if not length.isdigit() or int(length) > MAX_BODY_BYTES:
                raise _Broken(f"has a Content-Length drgpu does not take ({length[:20]!r})")
            return self._take(int(length))
        while self._fill(MAX_BODY_BYTES, may_end=True):  # to the end of the connection
            pass
        return self._take(len(self._buffer))


def _check_version(named: str) -> None:
    """Refuse an engine whose API (each answer names it) is older than drgpu needs."""
    try:
        version = tuple(int(part) for part in named.split(".")) if named else MIN_API_VERSION
    except ValueError:
        raise _Broken(f"names no API version drgpu reads ({named[:20]!r})") from None
    if version < MIN_API_VERSION:
        least = ".".join(map(str, MIN_API_VERSION))
        raise _Broken(f"says its API is {named[:20]}: drgpu needs {least} (Docker 20.10) or later")


def _log_call(method: str, path: str, outcome: str, started: float) -> None:
    """DRGPU_LOG: one API call, its outcome and duration."""
    if trace.enabled():
        took = (time.monotonic() - started) * 1000
        shown = urllib.parse.unquote(path)
        trace.debug(__name__, "%s %s: %s in %.3f ms", method, shown, outcome, took)


def _connect(address: Address, timeout_s: float) -> socket.socket:
    if address.socket_path is None:
        connection = socket.create_connection((address.host, address.port), timeout=timeout_s)
    else:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if address.socket_path is not None:
            connection.settimeout(timeout_s)
            connection.connect(address.socket_path)
        elif address.tls:
            return _tls_context(address).wrap_socket(connection, server_hostname=address.host)
    except OSError:
        connection.close()
        raise
    return connection


def _tls_context(address: Address) -> ssl.SSLContext:
    """The TLS of a `tcp://` engine: the folder's cert.pem and key.pem when there; when
    verifying, the engine's certificate checked against its ca.pem (else the system's)."""
    import ssl  # only for a TLS engine: its import takes a while

    ca, cert, key = (
        os.path.join(address.cert_dir, f"{name}.pem") for name in ("ca", "cert", "key")
    )
    if address.tls_verify:
        context = ssl.create_default_context(cafile=ca if os.path.isfile(ca) else None)
    else:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if os.path.isfile(cert):
        context.load_cert_chain(cert, key)
    return context


def address() -> Address:
    """drgpu's engine: `engine_address` of the environment under system.env's (`use_settings`)."""
    return engine_address({**os.environ, **_settings})


def connected() -> closing[Connection]:
    """A connection to drgpu's engine (`address`), closed after."""
    return closing(Connection(address()))


def call(method: str, path: str) -> Answer:
    """One API call on a connection of its own."""
    with connected() as connection:
        return connection.call(method, path)


def unframed(raw: bytes) -> bytes:
    """A log or exec stream's payloads, in order: those of the engine's multiplexed frames (a
    header of 8 bytes: the stream, three zeros, the size, big-endian), else the raw stream."""
    payloads, at = [], 0
    while at < len(raw):
        head = raw[at : at + 8]
        size = int.from_bytes(head[4:8], "big")
        if len(head) < 8 or head[0] > 2 or head[1:4] != b"\0\0\0" or at + 8 + size > len(raw):
            return raw  # not a multiplexed stream
        payloads.append(raw[at + 8 : at + 8 + size])
        at += 8 + size
    return b"".join(payloads)


def filters(wanted: Mapping[str, str]) -> str:
    """The engine's `filters` query value: each filter with its one value."""
    return urllib.parse.quote(json.dumps({key: [value] for key, value in wanted.items()}))
