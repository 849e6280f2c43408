"""Kubernetes manifests for a plan: one Deployment per service, GPUs as `nvidia.com/gpu`.

The NVIDIA device plugin hands out GPUs and GPU feature discovery labels each node with
its GPU product (`nvidia.com/gpu.product`, the NVML name with dashes for spaces), so a
service is sent to a node with the product of its planned GPUs. Kubernetes cannot pin a
GPU UUID without dynamic resource allocation (DRA): the plugin picks which GPU of the node.
Everything here is pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drgpu.core.model import Assignment, Plan, Role, ServicePlan
from drgpu.errors import ConfigError
from drgpu.targets.swarm_stack import SwarmService, swarm_services

GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
SHARED_SUFFIX = "-SHARED"
SHARING_CONFIG_MAP = "drgpu-gpu-sharing"
SHARING_CONFIG_KEY = "drgpu"
# DRGPU_SHARING modes the device plugin can do itself, and their names in its config.
PLUGIN_SHARING = {"timeslice": "timeSlicing", "mps": "mps"}
HEADER = """\
# Written by drgpu for {project}: Kubernetes manifests, one Deployment per service.
# GPUs come from the NVIDIA device plugin ({resource}); each GPU service goes to a node
# whose GPU feature discovery label {label} names the product of its planned GPUs.
# Kubernetes cannot pin a GPU UUID without dynamic resource allocation (DRA): the plugin
# picks which GPU of that node. Carried over from Compose: image, entrypoint, command and
# environment; not ports, volumes or networks.
"""
SHARING_COMMENT = """\
# The device plugin's GPU sharing ({mode}): each GPU counts as {replicas} {resource}.
# Point the plugin at it: helm --set config.name={name} --set config.default={key}
# (GPU Operator: devicePlugin.config.name and devicePlugin.config.default).
"""
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True)
class Manifests:
    """Rendered manifests and what the user should know about them."""

    text: str
    warnings: tuple[str, ...]


def render_manifests(
    plan: Plan, model: Mapping[str, Any], *, workers: int, sharing: str
) -> Manifests:
    """The manifests of a plan; `model` is the stack as Compose resolves it."""
    bodies: Mapping[str, Any] = model.get("services") or {}
    shapes = swarm_services(plan, bodies, workers)
    warnings: list[str] = []
    parts: list[str] = [
        HEADER.format(project=plan.project, resource=GPU_RESOURCE, label=PRODUCT_LABEL)
    ]
    shared_by = _users_per_gpu(plan, shapes)
    replicas = max(shared_by.values(), default=0)
    plugin_sharing = PLUGIN_SHARING.get(sharing)
    if plugin_sharing and replicas > 1:
        parts.append(
            SHARING_COMMENT.format(
                mode=sharing,
                replicas=replicas,
                resource=GPU_RESOURCE,
                name=SHARING_CONFIG_MAP,
                key=SHARING_CONFIG_KEY,
            )
            + _dump(_sharing_config_map(plan, plugin_sharing, replicas))
        )
    elif plugin_sharing:
        warnings.append(f"DRGPU_SHARING={sharing}, but the plan puts no two services on one GPU")
    elif replicas > 1:
        warnings.append("the plan shares a GPU, but DRGPU_SHARING names no device plugin sharing")
    shared = bool(plugin_sharing) and replicas > 1
    for shape in shapes:
        service = plan.service(shape.name)
        devices = _devices(plan, service, shape)
        deployment = _deployment(plan, shape, bodies[shape.name], devices, shared, warnings)
        parts.append(_dump(deployment))
    return Manifests(text="---\n".join(parts), warnings=tuple(warnings))


def _dump(document: dict[str, Any]) -> str:
    """YAML without anchors, multi-line strings as literal blocks."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def _text(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
        style = "|" if "\n" in data else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    _Dumper.add_representer(str, _text)
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def _devices(plan: Plan, service: ServicePlan, shape: SwarmService) -> tuple[Assignment, ...]:
    """The planned GPUs a service's pods are modelled on (all workers' for the simulator)."""
    if not shape.gpus:
        return ()
    if service.role is Role.SIMULATOR and shape.replicas is not None:
        workers = (s for s in plan.services if s.role is Role.SIMULATOR and s.has_gpu)
        return tuple({device.uuid: device for s in workers for device in s.devices}.values())
    return service.devices


def _users_per_gpu(plan: Plan, shapes: tuple[SwarmService, ...]) -> dict[str, int]:
    """How many pods the plan puts on each GPU."""
    users: dict[str, int] = {}
    for shape in shapes:
        for device in _devices(plan, plan.service(shape.name), shape):
            users[device.uuid] = users.get(device.uuid, 0) + (shape.replicas or 1)
    return users


def _sharing_config_map(plan: Plan, mode: str, replicas: int) -> dict[str, Any]:
    import yaml

    config = {
        "version": "v1",
        "sharing": {mode: {"resources": [{"name": GPU_RESOURCE, "replicas": replicas}]}},
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": SHARING_CONFIG_MAP, "labels": _labels(plan, None)},
        "data": {SHARING_CONFIG_KEY: yaml.safe_dump(config, sort_keys=False)},
    }


def _deployment(
    plan: Plan,
    shape: SwarmService,
    body: Mapping[str, Any],
    devices: tuple[Assignment, ...],
    shared: bool,
    warnings: list[str],
) -> dict[str, Any]:
    image = body.get("image")
    if not image:
        raise ConfigError(f"service {shape.name} has no image: Kubernetes cannot build one")
    if shape.role is Role.TRAINER_LAUNCHER:
        warnings.append(
            f"{shape.name} starts the trainer through the Docker socket (SageMaker local mode),"
            " which Kubernetes does not offer"
        )
    container: dict[str, Any] = {"name": _dns_label(shape.name), "image": str(image)}
    if body.get("entrypoint"):
        container["command"] = _words(body["entrypoint"])
    if body.get("command"):
        container["args"] = _words(body["command"])
    environment = {
        str(key): str(value)
        for key, value in (body.get("environment") or {}).items()
        if value is not None
    }
    if shape.gpus:
        environment.update(_gpu_environment(shape.gpus))
        container["resources"] = {"limits": {GPU_RESOURCE: shape.gpus}}
    else:
        environment["NVIDIA_VISIBLE_DEVICES"] = "void"
    container["env"] = [{"name": key, "value": value} for key, value in environment.items()]
    pod: dict[str, Any] = {}
    selector = _node_selector(shape.name, devices, shared, warnings)
    if selector:
        pod["nodeSelector"] = selector
    pod["containers"] = [container]
    labels = _labels(plan, shape)
    matching = {
        key: labels[key] for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance")
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": _dns_label(f"{plan.project}-{shape.name}"), "labels": labels},
        "spec": {
            "replicas": shape.replicas or 1,
            "selector": {"matchLabels": matching},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def _gpu_environment(gpus: int) -> dict[str, str]:
    """The pod sees only its GPUs: CUDA's indices are 0..gpus-1, in PCI bus order."""
    return {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(str(index) for index in range(gpus)),
    }


def _node_selector(
    name: str, devices: tuple[Assignment, ...], shared: bool, warnings: list[str]
) -> dict[str, str]:
    if not devices:
        return {}
    if any(device.mig for device in devices):
        warnings.append(
            f"{name} is planned on MIG slices: with the device plugin's mig.strategy=single a"
            f" slice is one {GPU_RESOURCE}; no {PRODUCT_LABEL} selector is set"
        )
        return {}
    products = sorted({gpu_product(device.gpu.name) for device in devices})
    if len(products) > 1:
        warnings.append(
            f"{name} is planned on GPUs of different products ({', '.join(products)}):"
            f" no {PRODUCT_LABEL} selector is set"
        )
        return {}
    product = products[0] + (SHARED_SUFFIX if shared else "")
    if not _LABEL_VALUE.match(product) or len(product) > 63:
        warnings.append(f"{product!r} is not a label value: no {PRODUCT_LABEL} selector for {name}")
        return {}
    return {PRODUCT_LABEL: product}


def gpu_product(name: str) -> str:
    """GPU feature discovery's product label value: the NVML name with dashes for spaces."""
    return name.strip().replace(" ", "-")


def _labels(plan: Plan, shape: SwarmService | None) -> dict[str, str]:
    labels = {"app.kubernetes.io/instance": plan.project, "app.kubernetes.io/managed-by": "drgpu"}
    if shape is not None:
        labels = {
            "app.kubernetes.io/name": shape.name,
            **labels,
            "drgpu/role": shape.role.value,
            "drgpu/run-id": plan.run_id,
        }
    return labels


def _dns_label(text: str) -> str:
    """A name Kubernetes accepts (RFC 1123 label): lowercase letters, digits and dashes."""
    return _NOT_DNS.sub("-", text.lower()).strip("-")[:63].rstrip("-")


def _words(value: Any) -> list[str]:
    if isinstance(value, str):
        import shlex

        return shlex.split(value)
    return [str(word) for word in value]
