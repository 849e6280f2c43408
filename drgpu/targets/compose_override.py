"""Render a plan as a Docker Compose override file: a pure, deterministic function."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drgpu.core.device_driver import request_ids
from drgpu.core.model import HEADER_MARK, Plan, ServicePlan
from drgpu.core.modes import DeviceDriver


@dataclass(frozen=True)
class Rendered:
    """A rendered target: `shown` for stdout (secret values masked), `text` for a file."""

    shown: str
    text: str
    warnings: tuple[str, ...]


class _Tagged:
    """A YAML node carrying one of compose's merge tags (`!override`, `!reset`)."""

    def __init__(self, tag: str, value: Any) -> None:
        self.tag = tag
        self.value = value


def render_override(plan: Plan, header_template: str | None) -> str:
    """The override YAML that gives each service of the plan exactly its devices, under
    `header_template` (`{project}`: the plan's, `{indices}`: whose its bare indices are; None:
    a one-line header)."""
    document: dict[str, Any] = {
        "services": {
            service.name: _service(service, plan.device_driver) for service in plan.services
        }
    }
    if plan.tmpfs_volumes:
        tmpfs = {"driver_opts": {"type": "tmpfs", "device": "tmpfs"}}
        document["volumes"] = {name: dict(tmpfs) for name in plan.tmpfs_volumes}
    bodies = [dump_yaml(part) for part in (*_base_documents(plan), document)]
    header = f"{HEADER_MARK} for compose project {plan.project}.\n"
    if header_template is not None:
        header = header_template.format(project=plan.project, indices=plan.index_order.whose)
    return header + "---\n".join(bodies)


def dump_yaml(document: Mapping[str, Any], *, blocks: bool = False) -> str:
    """YAML as drgpu writes it: keys in their order, no aliases, Compose's merge tags, and
    (`blocks`) each multi-line text as a literal block."""
    import yaml  # PyYAML takes a while to import: only when a file is rendered

    class _Dumper(yaml.CSafeDumper):  # libyaml's emitter: eight times quicker than PyYAML's
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def _represent_tagged(dumper: yaml.CSafeDumper, data: _Tagged) -> yaml.Node:
        if isinstance(data.value, list):
            return dumper.represent_sequence(data.tag, data.value)
        return dumper.represent_scalar(data.tag, "", style="'")  # (libyaml writes '' bare)

    def _block(dumper: yaml.CSafeDumper, data: str) -> yaml.Node:
        style = "|" if "\n" in data else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    _Dumper.add_representer(_Tagged, _represent_tagged)
    if blocks:
        _Dumper.add_representer(str, _block)
    return yaml.dump(dict(document), Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def _base_documents(plan: Plan) -> list[dict[str, Any]]:
    """Compose resolves `extends` file by file: a service defined in several compose files
    is copied from each, in order, one YAML document per file (merged as files are)."""
    documents: list[dict[str, Any]] = []
    for service in plan.services:
        if service.extends is None:
            continue
        for index, path in enumerate(service.extends_files[:-1]):
            if len(documents) <= index:
                documents.append({"services": {}})
            documents[index]["services"][service.name] = {
                "extends": {"file": path, "service": service.extends}
            }
    return documents


def _service(service: ServicePlan, driver: DeviceDriver) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if service.extends is not None:
        body["extends"] = {"file": service.extends_files[-1], "service": service.extends}
    if service.image is not None:
        body["image"] = compose_text(service.image)
    if service.command:
        body["command"] = compose_text(service.command)
    if service.placeholder:
        # Each replica a start script's `--scale` asks for runs `true` and exits: the
        # numbered workers are the simulators (see docs/drfc.md).
        body["entrypoint"] = _Tagged("!override", ["true"])
        body["command"] = _Tagged("!reset", [])
        body["ports"] = _Tagged("!reset", [])
    optional = {
        "init": service.init or None,
        "network_mode": service.network_mode,
        "ipc": service.ipc,
    }
    body.update((key, value) for key, value in optional.items() if value is not None)
    body["environment"] = compose_text(dict(service.environment))
    body["labels"] = compose_text(dict(service.labels))
    if service.volumes:
        body["volumes"] = list(service.volumes)
    if service.depends_on:
        body["depends_on"] = {name: {"condition": "service_started"} for name in service.depends_on}
    for key in service.reset_keys:
        if "." not in key:  # gpus, or a worker's copied container_name
            body[key] = _Tagged("!reset", None)
    if service.replicas is not None:
        # `scale` and `deploy.replicas` must agree: drop any scale, set the replicas.
        body["scale"] = _Tagged("!reset", None)
        body["deploy"] = {"replicas": service.replicas}
    devices = None
    if service.has_gpu:
        # A CDI request names `nvidia.com/gpu=<UUID>`; the engine ignores its capabilities,
        # which Compose still asks for.
        request = {
            "driver": driver.value,
            "device_ids": list(request_ids(driver, (device.uuid for device in service.devices))),
            "capabilities": list(service.capabilities),
        }
        devices = _Tagged("!override", [request])
    elif "deploy.resources.reservations.devices" in service.reset_keys:
        devices = _Tagged("!reset", [])
    if devices is not None:
        body.setdefault("deploy", {})["resources"] = {"reservations": {"devices": devices}}
    return body


def compose_text(data: Any) -> Any:
    """`data` with each `$` of its every text doubled: Compose (and `docker stack deploy`)
    interpolates `$NAME` in a file, and reads `$$` as one `$`."""
    if isinstance(data, str):
        return data.replace("$", "$$")
    if isinstance(data, Mapping):
        return {key: compose_text(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [compose_text(item) for item in data]
    return data
