"""The Docker engine boundary: the only module that speaks the Docker SDK."""

from __future__ import annotations

import json
import os
import re
import socket
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from drgpu.core import labels
from drgpu.core.facts import (
    ContainerFacts,
    DaemonFacts,
    DeviceRequestFacts,
    EngineFacts,
    ExecResult,
    ImageFacts,
    TaskFacts,
)
from drgpu.errors import DockerError

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
STACK_LABEL = "com.docker.stack.namespace"
SWARM_SERVICE_LABEL = "com.docker.swarm.service.name"
TASK_ID_LABEL = "com.docker.swarm.task.id"


@contextmanager
def _connected() -> Iterator[Any]:
    """A Docker SDK client, closed after use; an SDK failure inside becomes a DockerError."""
    client = _client()
    try:
        with _sdk_failures():
            yield client
    finally:
        client.close()


def _client() -> Any:
    try:
        import docker

        return docker.from_env(timeout=30)
    except Exception as exc:  # the SDK raises many kinds while probing the socket
        raise DockerError(
            f"cannot reach the Docker engine: {exc}",
            hint="is dockerd running, and DOCKER_HOST right?",
        ) from None


def project_containers(project: str) -> list[ContainerFacts]:
    """Every container (running or not) of a compose project, or of the Swarm stack of
    that name (its tasks on this node)."""
    compose = _containers({"label": f"{PROJECT_LABEL}={project}"})
    stack = _containers({"label": f"{STACK_LABEL}={project}"})
    return sorted({c.id: c for c in (*compose, *stack)}.values(), key=lambda c: c.name)


def stack_containers(namespace: str) -> dict[str, ContainerFacts]:
    """This node's containers of a Swarm stack, by the id of the task each runs."""
    return {
        container.labels[TASK_ID_LABEL]: container
        for container in _containers({"label": f"{STACK_LABEL}={namespace}"})
        if TASK_ID_LABEL in container.labels
    }


def drgpu_containers() -> list[ContainerFacts]:
    """Every container (running or not) that drgpu started: those with a `drgpu.run_id` label."""
    return _containers({"label": labels.RUN_ID})


def sagemaker_candidates() -> list[ContainerFacts]:
    """Every running container whose name holds `algo-` (SageMaker local mode names its
    trainers `...algo-N-xxxxx...`; core.gpu_usage decides which are)."""
    return [c for c in _containers({"name": "algo-"}) if c.state == "running"]


def drgpu_labels() -> list[tuple[str, Mapping[str, str]]]:
    """(state, labels) of every container with a `drgpu.run_id` label: what each run holds.

    One API call (and one more per live Swarm task whose GPUs the engine chose: their
    labels do not name them, so they are read from its environment). Over a local socket
    it is made without the SDK, which takes longer to import than `drgpu render` may take
    in all.
    """
    held: list[tuple[str, Mapping[str, str]]] = []
    for listed in _listing({"label": labels.RUN_ID}):
        chosen = listed.state == "running" and labels.engine_chosen(listed.labels)
        held.append(
            (listed.state, _engine_choice(listed.id, listed.labels) if chosen else listed.labels)
        )
    return held


def _engine_choice(container_id: str, container_labels: Mapping[str, str]) -> Mapping[str, str]:
    """A reserving Swarm task's labels, naming the GPUs the engine gave it."""
    status, answer = _api("GET", f"/containers/{urllib.parse.quote(container_id)}/json")
    if status == 404:  # gone meanwhile: it holds nothing
        return container_labels
    config = _checked(status, answer, "inspect a container", 200).get("Config") or {}
    return labels.with_engine_choice(container_labels, _environment(config.get("Env")))


def project_exists(project: str) -> bool:
    """Whether a compose project has any container (running or not): one quick call."""
    return bool(_listing({"label": f"{PROJECT_LABEL}={project}"}))


def _listing(filters: Mapping[str, str]) -> list[ContainerFacts]:
    """Every container (running or not) matching `filters`, from one listing call: ids,
    names, states and labels only."""
    found = _get(f"/containers/json?all=1&filters={_filters(filters)}")
    if not isinstance(found, list):
        raise DockerError("the Docker engine answered the container listing with no list")
    return [_brief_facts(item) for item in found]


def _local_socket() -> str | None:
    """The engine's unix socket, or None when DOCKER_HOST names another kind of host."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    return host.removeprefix("unix://") if host.startswith("unix://") else None


def _get(path: str, *, gone_ok: bool = False) -> Any:
    """GET `path` from the engine: its JSON answer (status 200 only; with `gone_ok`, None
    for 404: the object was removed meanwhile)."""
    status, body = _request("GET", path, b"", "application/json")
    if status == 404 and gone_ok:
        return None
    if status != 200:
        raise DockerError(
            f"the Docker engine answered {path.partition('?')[0]} with status {status}"
        )
    try:
        return json.loads(body)
    except ValueError:
        raise DockerError("the Docker engine's answer is not JSON") from None


def _containers(filters: Mapping[str, str]) -> list[ContainerFacts]:
    """Every container (running or not) matching `filters`, inspected; those removed
    meanwhile are left out (one listing, then one inspection per container)."""
    inspected = [
        attrs
        for listed in _listing(filters)
        if (attrs := _get(f"/containers/{listed.id}/json", gone_ok=True))
    ]
    return sorted((_facts(attrs) for attrs in inspected), key=lambda c: c.name)


def _facts(attrs: Mapping[str, Any]) -> ContainerFacts:
    config = attrs.get("Config") or {}
    container_labels = config.get("Labels") or {}
    host_config = attrs.get("HostConfig") or {}
    requests = host_config.get("DeviceRequests") or []
    project, service = _project_and_service(container_labels)
    return ContainerFacts(
        id=attrs["Id"],
        name=str(attrs.get("Name", "")).lstrip("/"),
        service=service,
        project=project,
        state=(attrs.get("State") or {}).get("Status", "unknown"),
        labels=container_labels,
        environment=_environment(config.get("Env")),
        device_requests=tuple(
            DeviceRequestFacts(
                driver=request.get("Driver") or "",
                device_ids=tuple(request.get("DeviceIDs") or ()),
                count=int(request.get("Count") or 0),
                capabilities=tuple(
                    cap for group in request.get("Capabilities") or [] for cap in group
                ),
            )
            for request in requests
        ),
        ipc_mode=str(host_config.get("IpcMode") or ""),
        exit_code=_exit_code(attrs.get("State") or {}),
        started_at=_timestamp(str((attrs.get("State") or {}).get("StartedAt") or "")),
    )


def _timestamp(text: str) -> float | None:
    """Seconds since the epoch of the engine's RFC 3339 time (nanoseconds cut to micro)."""
    from datetime import datetime

    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", text)
    if match is None or text.startswith("0001-"):
        return None
    fraction = (match[2] or "0")[:6].ljust(6, "0")
    zone = "+00:00" if match[3] == "Z" else match[3]
    return datetime.fromisoformat(f"{match[1]}.{fraction}{zone}").timestamp()


def _environment(variables: list[str] | None) -> dict[str, str]:
    """`NAME=value` lines (a container's or image's `Env`) as a mapping."""
    return dict(item.split("=", 1) for item in variables or [] if "=" in item)


def _exit_code(state: Mapping[str, Any]) -> int | None:
    code = state.get("ExitCode")
    return int(code) if isinstance(code, int) and state.get("Status") != "running" else None


def container_log_tail(container_id: str, lines: int) -> list[str]:
    """The last `lines` lines a container wrote (stdout and stderr); none when it is gone."""
    with _connected() as client:
        import docker.errors

        try:
            raw = client.api.logs(container_id, stdout=True, stderr=True, tail=lines)
        except docker.errors.NotFound:
            return []
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return text.splitlines()[-lines:]


def remove_containers(container_ids: list[str]) -> int:
    """Force-remove containers and their anonymous volumes; one already gone is no error.
    How many were removed."""
    removed = 0
    for container_id in container_ids:
        status, answer = _api("DELETE", f"/containers/{container_id}?force=1&v=1")
        _checked(status, answer, "remove a container", 204, 404)
        removed += status == 204
    return removed


def _project_and_service(container_labels: Mapping[str, str]) -> tuple[str, str]:
    """A container's compose project and service, or its Swarm stack and service (the
    stack's service name without the `<stack>_` prefix)."""
    if PROJECT_LABEL in container_labels or STACK_LABEL not in container_labels:
        return container_labels.get(PROJECT_LABEL, ""), container_labels.get(SERVICE_LABEL, "")
    stack = container_labels[STACK_LABEL]
    service = container_labels.get(SWARM_SERVICE_LABEL, "")
    return stack, service.removeprefix(f"{stack}_")


PROBE_PATH_IN_CONTAINER = "/tmp/drgpu-probe.py"


def run_file_in_container(
    container_id: str, source: bytes, args: list[str], interpreter: str = "python3"
) -> ExecResult:
    """Copy `source` into the container (put_archive) and run it there with `interpreter`."""
    import io
    import tarfile

    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo(PROBE_PATH_IN_CONTAINER.rsplit("/", 1)[1])
        info.size = len(source)
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(source))
    client = _client()
    try:
        container = client.containers.get(container_id)
        container.put_archive(PROBE_PATH_IN_CONTAINER.rsplit("/", 1)[0], archive.getvalue())
        result = container.exec_run(
            [interpreter, PROBE_PATH_IN_CONTAINER, *args], stdout=True, stderr=False, demux=False
        )
    except Exception as exc:
        raise DockerError(f"cannot run the probe in {container_id[:12]}: {exc}") from None
    finally:
        client.close()
    output = result.output.decode("utf-8", "replace") if result.output else ""
    return ExecResult(exit_code=int(result.exit_code), output=output)


class EngineSession:
    """One Docker connection kept open: a live view lists the containers every tick."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def containers(self) -> list[ContainerFacts]:
        """Every container, from one listing call: names, states and labels only."""
        with _sdk_failures():
            found = self._client.api.containers(all=True)
        return [_brief_facts(item) for item in found]

    def inspect(self, container_id: str) -> ContainerFacts | None:
        """Everything about one container (None when it is gone)."""
        import docker.errors

        with _sdk_failures():
            try:
                return _facts(self._client.api.inspect_container(container_id))
            except docker.errors.NotFound:
                return None


@contextmanager
def engine_session() -> Iterator[EngineSession]:
    """An open connection to the engine, closed when the block ends."""
    client = _client()
    try:
        yield EngineSession(client)
    finally:
        client.close()


@contextmanager
def _sdk_failures() -> Iterator[None]:
    """An SDK failure inside becomes a DockerError."""
    try:
        yield
    except DockerError:
        raise
    except Exception as exc:  # the SDK raises requests', urllib3's and its own errors
        raise DockerError(f"the Docker engine failed: {exc}") from None


def _brief_facts(attrs: Mapping[str, Any]) -> ContainerFacts:
    container_labels = attrs.get("Labels") or {}
    names = attrs.get("Names") or [""]
    project, service = _project_and_service(container_labels)
    return ContainerFacts(
        id=str(attrs.get("Id", "")),
        name=str(names[0]).lstrip("/"),
        service=service,
        project=project,
        state=attrs.get("State") or "unknown",
        labels=container_labels,
    )


def daemon_facts() -> DaemonFacts:
    """The engine's version, runtimes and CDI settings (DockerError when unreachable)."""
    with _connected() as client:
        info = client.info()
        version = client.version()
    return DaemonFacts(
        server_version=str(version.get("Version") or info.get("ServerVersion") or ""),
        api_version=str(version.get("ApiVersion") or ""),
        runtimes=tuple(sorted(info.get("Runtimes") or {})),
        default_runtime=str(info.get("DefaultRuntime") or ""),
        cdi_spec_dirs=tuple(info.get("CDISpecDirs") or ()),
        discovered_devices=tuple(
            f"{device.get('Source', '')}:{device.get('ID', '')}"
            for device in info.get("DiscoveredDevices") or ()
        ),
    )


def local_image(name: str) -> ImageFacts | None:
    """An image as the engine has it, or None when it is not there (nothing is pulled)."""
    with _connected() as client:
        import docker.errors

        try:
            attrs = client.api.inspect_image(name)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as exc:
            if exc.status_code in (400, 404):  # an invalid or unknown reference
                return None
            raise
    return ImageFacts(
        name=name,
        id=str(attrs.get("Id", "")),
        environment=_environment((attrs.get("Config") or {}).get("Env")),
    )


def try_device_request(image: str, timeout_s: float = 60) -> str | None:
    """Start a throwaway container of a local image with an NVIDIA device request for every
    GPU, running `true` without network: None when it ran, else the engine's error."""
    with _connected() as client:
        import docker.errors
        from docker.types import DeviceRequest

        container = client.containers.create(
            image,
            entrypoint=["true"],
            command=[],
            network_mode="none",
            labels={"drgpu.probe": "device-request"},
            device_requests=[DeviceRequest(driver="nvidia", count=-1, capabilities=[["gpu"]])],
        )
        try:
            container.start()
            code = int(container.wait(timeout=timeout_s).get("StatusCode", -1))
            return None if code == 0 else f"the probe container exited with status {code}"
        except docker.errors.APIError as exc:
            return str(exc.explanation or exc)
        finally:
            container.remove(force=True)


def stack_tasks(namespace: str) -> list[TaskFacts]:
    """Every task of every service of a Swarm stack (the manager sees all nodes')."""
    with _connected() as client:
        services = client.services.list(filters={"label": f"{STACK_LABEL}={namespace}"})
        tasks = [(service.name, task) for service in services for task in service.tasks()]
    return sorted(
        (_task_facts(name, task) for name, task in tasks),
        key=lambda task: (task.service, task.slot, task.id),
    )


def _task_facts(service: str, task: Mapping[str, Any]) -> TaskFacts:
    spec = (task.get("Spec") or {}).get("ContainerSpec") or {}
    status = task.get("Status") or {}
    return TaskFacts(
        id=task["ID"],
        service=service,
        slot=int(task.get("Slot") or 0),
        node_id=task.get("NodeID") or "",
        state=status.get("State") or "unknown",
        desired_state=task.get("DesiredState") or "",
        error=status.get("Err") or "",
        environment=_environment(spec.get("Env")),
        generic_resources=_named_resources(task.get("GenericResources") or []),
    )


def _named_resources(resources: list[Mapping[str, Any]]) -> tuple[tuple[str, str], ...]:
    named = (resource.get("NamedResourceSpec") for resource in resources)
    return tuple((spec["Kind"], spec["Value"]) for spec in named if spec)


def _resource_text(resource: Mapping[str, Any]) -> str:
    """`KIND=VALUE`, as daemon.json's node-generic-resources writes it."""
    spec = resource.get("NamedResourceSpec") or resource.get("DiscreteResourceSpec") or {}
    return f"{spec.get('Kind', '?')}={spec.get('Value', '?')}"


def stack_leftovers(namespace: str) -> dict[str, int]:
    """How many services, containers (on this node) and networks of a stack are left."""
    label = {"label": f"{STACK_LABEL}={namespace}"}
    with _connected() as client:
        return {
            "services": len(client.services.list(filters=label)),
            "containers": len(client.containers.list(all=True, filters=label, ignore_removed=True)),
            "networks": len(client.networks.list(filters=label)),
        }


def engine_facts() -> EngineFacts:
    """This node's engine: runtimes, advertised generic resources, Swarm state and labels."""
    with _connected() as client:
        info = client.info()
        swarm = info.get("Swarm") or {}
        node_labels: Mapping[str, str] | None = None
        nodes: dict[str, Mapping[str, str]] = {}
        if swarm.get("LocalNodeState") == "active" and swarm.get("ControlAvailable"):
            for node in client.nodes.list():
                nodes[node.id] = (node.attrs.get("Spec") or {}).get("Labels") or {}
            node_labels = nodes.get(swarm["NodeID"], {})
    return EngineFacts(
        version=str(info.get("ServerVersion") or ""),
        default_runtime=str(info.get("DefaultRuntime") or ""),
        runtimes=tuple(sorted(info.get("Runtimes") or {})),
        generic_resources=tuple(
            _resource_text(resource) for resource in info.get("GenericResources") or []
        ),
        swarm_state=str(swarm.get("LocalNodeState") or "inactive"),
        node_labels=None if node_labels is None else dict(node_labels),
        node_id=str(swarm.get("NodeID") or ""),
        swarm_nodes=nodes,
    )


def _api(method: str, path: str, body: Any = None, *, tar: bytes | None = None) -> tuple[int, Any]:
    """(status, JSON answer) of one Docker API call. Over a local socket without the SDK,
    which takes longer to import than `drgpu down` may take in all; else through it."""
    data = tar if tar is not None else b"" if body is None else json.dumps(body).encode()
    content_type = "application/x-tar" if tar is not None else "application/json"
    status, raw = _request(method, path, data, content_type)
    try:
        return status, json.loads(raw) if raw.strip() else None
    except ValueError:
        return status, None


def _request(method: str, path: str, data: bytes, content_type: str) -> tuple[int, bytes]:
    """(status, body) of one Docker API call: over a local socket without the SDK, else
    through it."""
    socket_path = _local_socket()
    if socket_path is not None:
        return _local_request(socket_path, method, path, data, content_type)
    with _connected() as client:
        api = client.api
        answer = api.request(
            method, f"{api.base_url}{path}", data=data, headers={"Content-Type": content_type}
        )
        return answer.status_code, answer.content


def _local_request(
    socket_path: str, method: str, path: str, data: bytes, content_type: str
) -> tuple[int, bytes]:
    """One HTTP/1.0 request on the engine's unix socket: (status, body)."""
    head = (
        f"{method} {path} HTTP/1.0\r\nHost: docker\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(60)
            connection.connect(socket_path)
            connection.sendall(head.encode() + data)
            chunks = []
            while chunk := connection.recv(65536):
                chunks.append(chunk)
    except OSError as exc:
        raise DockerError(
            f"cannot reach the Docker engine at {socket_path}: {exc.strerror or exc}",
            hint="is dockerd running, and DOCKER_HOST right?",
        ) from None
    answer_head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = answer_head.split(b"\r\n", 1)[0].split(b" ")
    try:
        return int(status[1]), body
    except (IndexError, ValueError):
        raise DockerError(f"the Docker engine answered {method} {path} with no status") from None


def _checked(status: int, answer: Any, what: str, *ok: int) -> Any:
    if status not in ok:
        message = answer.get("message") if isinstance(answer, dict) else None
        raise DockerError(f"the Docker engine refused to {what}: {message or status}")
    return answer


# --- the engine-wide lock: a container that is created, never started --------------------

LOCK_NAME = "drgpu-lock"
LOCK_IMAGE = "drgpu/lock:1"
_EMPTY_TAR = bytes(10240)  # an empty tar archive: the lock image has no files at all


def create_lock(labels: Mapping[str, str]) -> str | None:
    """Create the lock object with `labels`: its id, or None when it exists already."""
    body = {
        "Image": LOCK_IMAGE,
        "Cmd": ["drgpu-lock"],
        "Labels": dict(labels),
        "NetworkDisabled": True,
        "HostConfig": {"NetworkMode": "none"},
    }
    path = f"/containers/create?name={LOCK_NAME}"
    status, answer = _api("POST", path, body)
    if status == 404:  # no lock image on this engine yet: import it (an empty image)
        repo, tag = LOCK_IMAGE.split(":")
        _checked(
            *_api("POST", f"/images/create?fromSrc=-&repo={repo}&tag={tag}", tar=_EMPTY_TAR),
            "import drgpu's lock image",
            200,
        )
        status, answer = _api("POST", path, body)
    if status == 409:
        return None
    return str(_checked(status, answer, "create drgpu's lock", 201)["Id"])


def lock_state() -> tuple[str, Mapping[str, str]] | None:
    """(id, labels) of the lock object, or None when there is none."""
    status, answer = _api("GET", f"/containers/{LOCK_NAME}/json")
    if status == 404:
        return None
    answer = _checked(status, answer, "read drgpu's lock", 200)
    return str(answer["Id"]), (answer.get("Config") or {}).get("Labels") or {}


def remove_lock(lock_id: str) -> None:
    """Remove the lock object `lock_id` (by id: never a lock someone else took since)."""
    _checked(*_api("DELETE", f"/containers/{lock_id}?force=1"), "remove drgpu's lock", 204, 404)


MARKS_VOLUME = "drgpu-marks"


def down_marks() -> dict[str, str]:
    """The marks `drgpu down` left (labels of an empty volume), or none."""
    status, answer = _api("GET", f"/volumes/{MARKS_VOLUME}")
    if status == 404:
        return {}
    return dict(_checked(status, answer, "read drgpu's marks", 200).get("Labels") or {})


def write_down_marks(marks: Mapping[str, str]) -> None:
    """Replace the marks (under the lock: nobody else writes them meanwhile)."""
    _checked(*_api("DELETE", f"/volumes/{MARKS_VOLUME}"), "replace drgpu's marks", 204, 404)
    body = {"Name": MARKS_VOLUME, "Labels": dict(marks)}
    _checked(*_api("POST", "/volumes/create", body), "write drgpu's marks", 201)


# --- what a run leaves: containers, networks and volumes of a compose project -------------


def project_volumes(project: str) -> tuple[str, ...]:
    """The names of the volumes Compose created for `project`."""
    status, answer = _api("GET", f"/volumes?filters={_label_filter(project)}")
    volumes = _checked(status, answer, "list volumes", 200).get("Volumes") or []
    return tuple(sorted(str(volume["Name"]) for volume in volumes))


def remove_run(project: str, keep_volumes: tuple[str, ...]) -> dict[str, int]:
    """Remove every container and network of `project`, and every volume of it not in
    `keep_volumes`; how many of each were removed."""
    query = _label_filter(project)
    removed = {"containers": 0, "networks": 0, "volumes": 0}
    status, found = _api("GET", f"/containers/json?all=1&filters={query}")
    listed = _checked(status, found, "list containers", 200)
    removed["containers"] = remove_containers([container["Id"] for container in listed])
    status, found = _api("GET", f"/networks?filters={query}")
    for network in _checked(status, found, "list networks", 200):
        status, answer = _api("DELETE", f"/networks/{network['Id']}")
        _checked(status, answer, "remove a network", 204, 404)
        removed["networks"] += status == 204
    for name in project_volumes(project):
        if name not in keep_volumes:
            status, answer = _api("DELETE", f"/volumes/{urllib.parse.quote(name)}")
            _checked(status, answer, "remove a volume", 204, 404)
            removed["volumes"] += status == 204
    return removed


def stack_service_count(namespace: str) -> int:
    """How many Swarm services the stack `namespace` has; 0 on an engine that is no swarm
    manager (it has no services to ask about)."""
    query = _filters({"label": f"{STACK_LABEL}={namespace}"})
    status, answer = _api("GET", f"/services?filters={query}")
    if status == 503:  # this node is not a swarm manager
        return 0
    return len(_checked(status, answer, "list services", 200))


def _label_filter(project: str) -> str:
    return _filters({"label": f"{PROJECT_LABEL}={project}"})


def _filters(filters: Mapping[str, str]) -> str:
    """The engine's `filters` query value: each filter with its one value."""
    return urllib.parse.quote(json.dumps({key: [value] for key, value in filters.items()}))
