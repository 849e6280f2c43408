"""Render a plan as a Docker Compose override file: a pure, deterministic function."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from drgpu.model import Plan, ServicePlan

HEADER_MARK = "# Written by drgpu"
_DEVICES_PATH = ("deploy", "resources", "reservations", "devices")


class _Tagged:
    """A YAML node carrying one of compose's merge tags (`!override`, `!reset`)."""

    def __init__(self, tag: str, value: Any) -> None:
        self.tag = tag
        self.value = value


def render_override(plan: Plan) -> str:
    """The override YAML that gives each service of the plan exactly its devices."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        """Dumps compose's merge tags and never aliases repeated values."""

        def ignore_aliases(self, data: Any) -> bool:
            return True

    def _represent_tagged(dumper: yaml.SafeDumper, data: _Tagged) -> yaml.Node:
        if isinstance(data.value, list):
            return dumper.represent_sequence(data.tag, data.value)
        if isinstance(data.value, dict):
            return dumper.represent_mapping(data.tag, data.value)
        return dumper.represent_scalar(data.tag, "")

    _Dumper.add_representer(_Tagged, _represent_tagged)
    document = {"services": {service.name: _service(service) for service in plan.services}}
    body = yaml.dump(document, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
    return _header(plan) + body


def _header(plan: Plan) -> str:
    here = Path(__file__).resolve().parent
    for candidate in (here / "_data" / "templates", here.parent / "templates"):
        template = candidate / "override-header.txt"
        if template.is_file():
            return template.read_text(encoding="utf-8").format(project=plan.project)
    return f"{HEADER_MARK} for compose project {plan.project}.\n"


def _service(service: ServicePlan) -> dict[str, Any]:
    body: dict[str, Any] = {
        "environment": dict(service.environment),
        "labels": dict(service.labels),
    }
    if "gpus" in service.reset_keys:
        body["gpus"] = _Tagged("!reset", None)
    if service.has_gpu:
        request = {
            "driver": "nvidia",
            "device_ids": [device.uuid for device in service.devices],
            "capabilities": list(service.capabilities),
        }
        _put(body, _DEVICES_PATH, _Tagged("!override", [request]))
    elif ".".join(_DEVICES_PATH) in service.reset_keys:
        _put(body, _DEVICES_PATH, _Tagged("!reset", []))
    return body


def _put(body: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = body
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
