"""What drgpu asks the Docker engine (through `docker_api`): its containers, images,
volumes and networks, what it is, and a file run in a container. The Swarm's services,
tasks and nodes are `swarm_engine`'s; drgpu's lock object is `enginelock`'s."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from drgpu.core import labels
from drgpu.core.facts import ContainerFacts, DeviceRequestFacts, EngineFacts, ImageFacts
from drgpu.errors import DockerError
from drgpu.host import docker_api
from drgpu.host.docker_api import Connection, filters

PROJECT_LABEL = "com.docker.compose.project"
MARKS_VOLUME = "drgpu-marks"  # an empty volume whose labels are `drgpu down`'s marks


def project_containers(project: str) -> list[ContainerFacts]:
    """Every container (running or not) of a compose project or Swarm stack, on this node."""
    with docker_api.connected() as engine:
        compose = containers(engine, _of(project))
        stack = containers(engine, {"label": f"{labels.SWARM_STACK}={project}"})
    return sorted({c.id: c for c in (*compose, *stack)}.values(), key=lambda c: c.name)


def drgpu_containers() -> list[ContainerFacts]:
    """Every container (running or not) that drgpu started: those with a `drgpu.run_id` label."""
    with docker_api.connected() as engine:
        return containers(engine, {"label": labels.RUN_ID})


def sagemaker_containers() -> list[ContainerFacts]:
    """Every SageMaker local-mode trainer, running or not (created, not yet started)."""
    from drgpu.core.drfc_scripts import SAGEMAKER_NAME_PART, is_sagemaker_local

    with docker_api.connected() as engine:
        found = containers(engine, {"name": SAGEMAKER_NAME_PART})
    return [c for c in found if is_sagemaker_local(c)]


def drgpu_labels() -> list[tuple[str, Mapping[str, str]]]:
    """(state, labels) of every container with a `drgpu.run_id` label: what each run holds
    (a running Swarm task whose GPUs the engine chose, inspected, names them in its labels)."""
    held: list[tuple[str, Mapping[str, str]]] = []
    with docker_api.connected() as engine:
        for listed in listing(engine, {"label": labels.RUN_ID}):
            chosen = listed.state == "running" and labels.engine_chosen(listed.labels)
            found = inspected(engine, listed.id) if chosen else None  # None: gone meanwhile
            held.append(
                (listed.state, labels.with_engine_choice(found) if found else listed.labels)
            )
    return held


def project_resources(project: str) -> tuple[int, int]:
    """How many containers (running or not) and networks a compose project has."""
    with docker_api.connected() as engine:
        return len(listing(engine, _of(project))), len(_project_networks(engine, project))


def listing(engine: Connection, wanted: Mapping[str, str] | None = None) -> list[ContainerFacts]:
    """Every container matching the filters `wanted`: ids, names, states and labels only."""
    query = f"&filters={filters(wanted)}" if wanted else ""
    found = engine.call("GET", f"/containers/json?all=1{query}")
    return [
        _container(
            c.get("Id", ""), (c.get("Names") or [""])[0], c.get("State"), c.get("Labels") or {}
        )
        for c in found.checked("list containers", 200, kind=list)
    ]


def inspected(engine: Connection, container_id: str) -> ContainerFacts | None:
    """Everything about one container (None when it is gone)."""
    answer = engine.call("GET", f"/containers/{urllib.parse.quote(container_id)}/json")
    return None if answer.status == 404 else _facts(answer.checked("inspect a container", 200))


def containers(engine: Connection, wanted: Mapping[str, str]) -> list[ContainerFacts]:
    """Every container (running or not) matching `wanted`, inspected; those gone are left out."""
    found = (inspected(engine, listed.id) for listed in listing(engine, wanted))
    return sorted((c for c in found if c is not None), key=lambda c: c.name)


def _facts(attrs: Mapping[str, Any]) -> ContainerFacts:
    config, host_config, state = (attrs.get(key) or {} for key in ("Config", "HostConfig", "State"))
    code = state.get("ExitCode")
    return _container(
        attrs["Id"],
        attrs.get("Name", ""),
        state.get("Status"),
        config.get("Labels") or {},
        environment=environment(config.get("Env")),
        device_requests=tuple(
            DeviceRequestFacts(
                driver=request.get("Driver") or "",
                device_ids=tuple(request.get("DeviceIDs") or ()),
                count=int(request.get("Count") or 0),
                capabilities=tuple(
                    cap for group in request.get("Capabilities") or [] for cap in group
                ),
            )
            for request in host_config.get("DeviceRequests") or []
        ),
        ipc_mode=str(host_config.get("IpcMode") or ""),
        exit_code=int(code) if isinstance(code, int) and state.get("Status") != "running" else None,
        started_at=_timestamp(str(state.get("StartedAt") or "")),
    )


def _container(
    id_: Any, name: Any, state: Any, tags: Mapping[str, str], **more: Any
) -> ContainerFacts:
    """A listed or inspected container: its compose project and service, or its Swarm stack
    and service (the stack's service name without the `<stack>_` prefix)."""
    project, service = tags.get(PROJECT_LABEL, ""), tags.get(labels.SERVICE, "")
    if PROJECT_LABEL not in tags and labels.SWARM_STACK in tags:
        project = tags[labels.SWARM_STACK]
        service = tags.get(labels.SWARM_SERVICE, "").removeprefix(f"{project}_")
    name, state = str(name).lstrip("/"), state or "unknown"
    return ContainerFacts(str(id_), name, service, project, state, tags, **more)


def _timestamp(text: str) -> float | None:
    """Seconds since the epoch of the engine's RFC 3339 time, nanoseconds cut to micro (as
    Python 3.10's fromisoformat reads neither them nor `Z`); None for its zero time."""
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", text)
    if match is None or text.startswith("0001-"):
        return None
    fraction = (match[2] or "0")[:6].ljust(6, "0")
    zone = "+00:00" if match[3] == "Z" else match[3]
    return datetime.fromisoformat(f"{match[1]}.{fraction}{zone}").timestamp()


def environment(variables: list[str] | None) -> dict[str, str]:
    """`NAME=value` lines (a container's, task's or image's `Env`) as a mapping."""
    return dict(item.split("=", 1) for item in variables or [] if "=" in item)


def container_log_tail(container_id: str, lines: int) -> list[str]:
    """The last `lines` lines a container wrote (stdout and stderr); none when it is gone."""
    path = f"/containers/{urllib.parse.quote(container_id)}/logs?stdout=1&stderr=1&tail={lines}"
    answer = docker_api.call("GET", path)
    if answer.status == 404:
        return []
    text = docker_api.unframed(answer.checked_body("read a container's log", 200))
    return text.decode("utf-8", "replace").splitlines()[-lines:]


def remove_containers(container_ids: list[str]) -> int:
    """Force-remove containers and their anonymous volumes: how many were removed."""
    with docker_api.connected() as engine:
        return _deleted(engine, "container", container_ids, "?force=1&v=1")


def _deleted(engine: Connection, kind: str, ids: Iterable[str], query: str = "") -> int:
    """DELETE each `kind` of `ids` (one already gone is no error): how many were removed."""
    removed = 0
    for one in ids:
        answer = engine.call("DELETE", f"/{kind}s/{urllib.parse.quote(one)}{query}")
        answer.checked(f"remove a {kind}", 204, 404)
        removed += answer.status == 204
    return removed


def run_probe_in(container_id: str, source: str, args: list[str]) -> tuple[int, str]:
    """Run drgpu's probe (`source`, handed over in the exec's environment, so nothing is
    written into the container) there with python3: its exit code and stdout."""
    from drgpu.probe import LAUNCHER, SOURCE_VARIABLE

    quoted = urllib.parse.quote(container_id)
    exec_body = {
        "AttachStdout": True,
        "AttachStderr": False,
        "Cmd": ["python3", "-c", LAUNCHER, *args],
        "Env": [f"{SOURCE_VARIABLE}={source}"],
    }
    with docker_api.connected() as engine:
        answer = engine.call("POST", f"/containers/{quoted}/exec", exec_body)
        exec_id = _probe_step(answer, container_id, 201).created_id("run the probe")
        answer = engine.call("POST", f"/exec/{exec_id}/start", {"Detach": False, "Tty": False})
        output = docker_api.unframed(answer.body) if answer.status == 200 else b""
        _probe_step(answer, container_id, 200)
        answer = engine.call("GET", f"/exec/{exec_id}/json")
        exit_code = (
            _probe_step(answer, container_id, 200).checked("run the probe", 200).get("ExitCode")
        )
    return int(exit_code if exit_code is not None else -1), output.decode("utf-8", "replace")


def _probe_step(answer: docker_api.Answer, container_id: str, ok: int) -> docker_api.Answer:
    if answer.status != ok:
        raise DockerError(f"cannot run the probe in {container_id[:12]}: {answer.message()}")
    return answer


def daemon_facts() -> EngineFacts:
    """The engine's version, runtimes and CDI settings (DockerError when unreachable)."""
    answer = docker_api.call("GET", "/info")
    return daemon_facts_of(answer.checked("say what it is", 200), answer.headers)


def daemon_facts_of(info: Mapping[str, Any], headers: Mapping[str, str]) -> EngineFacts:
    """The facts of the engine's `/info` answer and its headers (`Api-Version`); Docker 28.2+'s
    `DiscoveredDevices` `{"Source": "cdi", "ID": "nvidia.com/gpu=GPU-..."}` as `cdi:<ID>`."""
    return EngineFacts(
        version=str(info.get("ServerVersion") or ""),
        api_version=headers.get("api-version", ""),
        runtimes=tuple(sorted(info.get("Runtimes") or {})),
        default_runtime=str(info.get("DefaultRuntime") or ""),
        discovered_devices=tuple(
            f"{device.get('Source', '')}:{device.get('ID', '')}"
            for device in info.get("DiscoveredDevices") or ()
        ),
        cgroup_driver=str(info.get("CgroupDriver") or ""),
    )


def local_image(name: str) -> ImageFacts | None:
    """An image as the engine has it, or None when it is not there (nothing is pulled)."""
    answer = docker_api.call("GET", f"/images/{urllib.parse.quote(name, safe='/:@')}/json")
    if answer.status in (400, 404):  # an invalid or unknown reference
        return None
    attrs = answer.checked("inspect an image", 200)
    return ImageFacts(
        name=name,
        id=str(attrs.get("Id", "")),
        environment=environment((attrs.get("Config") or {}).get("Env")),
    )


def try_device_request(image: str) -> str | None:
    """Run `true` without network in a throwaway container of a local image that requests
    every NVIDIA GPU: None when it ran (within a minute), else the engine's error."""
    body = {
        "Image": image,
        "Entrypoint": ["true"],
        "Cmd": [],
        "Labels": {"drgpu.probe": "device-request"},
        "HostConfig": {
            "NetworkMode": "none",
            "DeviceRequests": [{"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}],
        },
    }
    with docker_api.connected() as engine:
        created = engine.call("POST", "/containers/create", body)
        container_id = created.created_id("create the probe container")
        try:
            started = engine.call("POST", f"/containers/{container_id}/start")
            if started.status not in (204, 304):
                return started.message()
            waited = engine.call("POST", f"/containers/{container_id}/wait", timeout_s=60)
            code = int(waited.checked("wait for the probe container", 200).get("StatusCode", -1))
            return None if code == 0 else f"the probe container exited with status {code}"
        finally:
            engine.call("DELETE", f"/containers/{container_id}?force=1")


def read_down_marks() -> dict[str, str]:
    """The marks `drgpu down` left, or none."""
    answer = docker_api.call("GET", f"/volumes/{MARKS_VOLUME}")
    if answer.status == 404:
        return {}
    return dict(answer.checked("read drgpu's marks", 200).get("Labels") or {})


def write_down_marks(marks: Mapping[str, str]) -> None:
    """Replace the marks (under the lock: nobody else writes them meanwhile)."""
    with docker_api.connected() as engine:
        engine.call("DELETE", f"/volumes/{MARKS_VOLUME}").checked("replace drgpu's marks", 204, 404)
        body = {"Name": MARKS_VOLUME, "Labels": dict(marks)}
        engine.call("POST", "/volumes/create", body).checked("write drgpu's marks", 201)


def project_volumes(project: str) -> tuple[str, ...]:
    """The names of the volumes Compose created for `project`."""
    with docker_api.connected() as engine:
        return _project_volumes(engine, project)


def remove_volumes(names: Iterable[str]) -> int:
    """Remove the volumes `names` (one gone already is no error): how many were."""
    with docker_api.connected() as engine:
        return _deleted(engine, "volume", names)


def _project_volumes(engine: Connection, project: str) -> tuple[str, ...]:
    answer = engine.call("GET", f"/volumes?filters={filters(_of(project))}")
    volumes = answer.checked("list volumes", 200).get("Volumes") or []
    return tuple(sorted(str(volume["Name"]) for volume in volumes))


def _project_networks(engine: Connection, project: str) -> list[Any]:
    answer = engine.call("GET", f"/networks?filters={filters(_of(project))}")
    return list(answer.checked("list networks", 200, kind=list))


def remove_run(project: str, keep_volumes: tuple[str, ...]) -> dict[str, int]:
    """Remove `project`'s containers, networks and volumes but `keep_volumes`: how many of each."""
    with docker_api.connected() as engine:
        listed = [container.id for container in listing(engine, _of(project))]
        removed = {"containers": _deleted(engine, "container", listed, "?force=1&v=1")}
        networks = (network["Id"] for network in _project_networks(engine, project))
        removed["networks"] = _deleted(engine, "network", networks)
        gone = [v for v in _project_volumes(engine, project) if v not in keep_volumes]
        removed["volumes"] = _deleted(engine, "volume", gone)
    return removed


def _of(project: str) -> dict[str, str]:
    """The filter of a compose project's objects."""
    return {"label": f"{PROJECT_LABEL}={project}"}
