"""Kubernetes manifests for a plan, pure: GPUs from the NVIDIA device plugin on a node of the
planned GPUs' product, or from dynamic resource allocation (DRA) by UUID (see the headers)."""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from drgpu.core.labels import FORWARDED_GPUS
from drgpu.core.model import Assignment, Plan, Role
from drgpu.core.modes import Sharing
from drgpu.core.redaction import MASK, is_secret, masked_data, secret_values, service_secrets
from drgpu.core.service_gpus import ServiceGpus, own_gpus_environment, service_gpus
from drgpu.errors import ConfigError, GpuValidationError
from drgpu.targets.compose_override import Rendered, dump_yaml

GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
SHARED_SUFFIX = "-SHARED"
SHARING_CONFIG_MAP = "drgpu-gpu-sharing"
SHARING_CONFIG_KEY = "drgpu"
# DRGPU_SHARING modes the device plugin can do itself, and their names in its config.
PLUGIN_SHARING = {Sharing.TIMESLICE: "timeSlicing", Sharing.MPS: "mps"}
DRA_API = "resource.k8s.io/v1"
DRA_DRIVER = "gpu.nvidia.com"
DEVICE_CLASSES = {False: "gpu.nvidia.com", True: "mig.nvidia.com"}  # by MIG or not
UUID_SELECTOR = "device.attributes[{driver}].uuid == {uuid}"  # each a CEL string literal
HEADER = f"""\
# Written by drgpu for {{project}}: Kubernetes manifests, one Deployment per service.
# GPUs come from the NVIDIA device plugin ({GPU_RESOURCE}); each GPU service goes to a node
# whose GPU feature discovery label {PRODUCT_LABEL} names the product of its planned GPUs.
# Kubernetes cannot pin a GPU UUID without dynamic resource allocation (DRA): the plugin
# picks which GPU of that node. Carried over from Compose: image, entrypoint, command and
# environment; not ports, volumes or networks.
"""
SHARING_COMMENT = (
    "# The device plugin's GPU sharing ({mode}): each GPU counts as {replicas}"
    f" {GPU_RESOURCE}.\n"
    f"# Point the plugin at it: helm --set config.name={SHARING_CONFIG_MAP}"
    f" --set config.default={SHARING_CONFIG_KEY}\n"
    "# (GPU Operator: devicePlugin.config.name and devicePlugin.config.default).\n"
)
DRA_HEADER = f"""\
# Written by drgpu for {{project}}: Kubernetes manifests, one Deployment per service and
# per simulator worker. GPUs come from dynamic resource allocation ({DRA_API}, Kubernetes
# 1.34+) through NVIDIA's DRA driver: each ResourceClaim names its GPUs by UUID (CEL
# selectors on device class {DEVICE_CLASSES[False]}), so each pod gets exactly its planned GPUs;
# workers planned on one GPU share its claim. Carried over from Compose: image,
# entrypoint, command and environment (secret values in a Secret); not ports, volumes
# or networks.
"""
SECRET_COMMENT = """\
# {name}: the secret settings of {service} (names holding KEY, SECRET, TOKEN,
# PASSWORD, PASSWD or CREDENTIAL), referenced by secretKeyRef.{masked}
"""
MASKED_NOTE = " Values masked here: `drgpu render --k8s -o FILE` writes them."
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_Part = tuple[dict[str, Any], str]  # a manifest and the comment before it


def render_manifests(
    plan: Plan,
    model: Mapping[str, Any],
    *,
    workers: int,
    sharing: Sharing,
    dra: bool = False,
    secrets: Iterable[str] = (),
) -> Rendered:
    """The manifests of a plan (`model`: the stack as Compose resolves it); the shown text
    masks the Secrets' values and `secrets` (the settings' secret values) wherever they appear."""
    bodies: Mapping[str, Any] = model.get("services") or {}
    shapes = service_gpus(plan, bodies, workers)
    warnings: list[str] = []
    known = (*secrets, *service_secrets(bodies))
    if dra:
        parts = _dra_parts(plan, shapes, bodies, warnings, known)
        header = DRA_HEADER.format(project=plan.project)
    else:
        parts = _plugin_parts(plan, shapes, bodies, sharing, warnings, known)
        header = HEADER.format(project=plan.project)
    own = {
        key: value
        for document, _ in parts
        if document["kind"] == "Secret"
        for key, value in document["stringData"].items()
    }
    hidden = (*known, *secret_values(own))
    text = "---\n".join([header, *(_text(part, None) for part in parts)])
    shown = "---\n".join([header, *(_text(part, hidden) for part in parts)])
    return Rendered(shown, text, tuple(warnings))


def _text(part: _Part, hidden: tuple[str, ...] | None) -> str:
    """A manifest after its comment; `hidden`: the values to mask (before YAML escapes
    them), a Secret's values all masked; None: the real values."""
    document, comment = part
    secret = document["kind"] == "Secret"
    if hidden is not None:
        document = masked_data(document, hidden)
        if secret:
            document["stringData"] = dict.fromkeys(document["stringData"], MASK)
    if secret:
        comment = comment.format(masked="" if hidden is None else MASKED_NOTE)
    return comment + dump_yaml(document, blocks=True)


def cel_string(text: str) -> str:
    """`text` as a CEL string literal (JSON's escapes are CEL's)."""
    return json.dumps(text, ensure_ascii=False)


def _plugin_parts(
    plan: Plan,
    shapes: tuple[ServiceGpus, ...],
    bodies: Mapping[str, Any],
    sharing: Sharing,
    warnings: list[str],
    known: tuple[str, ...],
) -> list[_Part]:
    """Deployments whose GPU services ask the NVIDIA device plugin for nvidia.com/gpu."""
    parts: list[_Part] = []
    devices = {shape.name: _devices(plan, shape) for shape in shapes}
    # how many pods the plan puts on each GPU
    users = Counter(d.uuid for s in shapes for _ in range(s.replicas or 1) for d in devices[s.name])
    replicas = max(users.values(), default=0)
    plugin_sharing = PLUGIN_SHARING.get(sharing)
    if plugin_sharing and replicas > 1:
        resources = [{"name": GPU_RESOURCE, "replicas": replicas}]
        config = {"version": "v1", "sharing": {plugin_sharing: {"resources": resources}}}
        data = {SHARING_CONFIG_KEY: dump_yaml(config)}
        comment = SHARING_COMMENT.format(mode=sharing, replicas=replicas)
        parts.append((_object(plan, "ConfigMap", SHARING_CONFIG_MAP, data=data), comment))
    elif plugin_sharing:
        warnings.append(f"DRGPU_SHARING={sharing}, but the plan puts no two services on one GPU")
    elif replicas > 1:
        warnings.append("the plan shares a GPU, but DRGPU_SHARING names no device plugin sharing")
    shared = bool(plugin_sharing) and replicas > 1
    for shape in shapes:
        mine, wanted = devices[shape.name], (shape.replicas or 1) * shape.gpus
        if not shared and wanted > len(mine):
            listed = ", ".join(str(device.gpu.index) for device in mine)
            raise GpuValidationError(
                [
                    f"{shape.name}: {shape.replicas or 1} pod(s) of {shape.gpus} GPU(s) need"
                    f" {wanted} GPUs of their own, but the plan gives {shape.name} {len(mine)}"
                    f" ({listed}): the NVIDIA device plugin never gives two pods one GPU"
                ],
                hint="lower DR_WORKERS, set DRGPU_SHARING=timeslice, or render --k8s --dra"
                " (workers planned on one GPU share its ResourceClaim)",
            )
        limits = {"limits": {GPU_RESOURCE: shape.gpus}} if shape.gpus else None
        extra = own_gpus_environment(shape.gpus) if shape.gpus else {}
        body = bodies[shape.name]
        pod, secret = _pod(plan, shape, shape.name, body, warnings, limits, extra, known)
        selector = _node_selector(shape.name, mine, shared, warnings)
        if selector:
            pod = {"nodeSelector": selector, **pod}
        parts.extend(secret)
        parts.append((_deployment(plan, shape, shape.name, shape.replicas or 1, pod), ""))
    return parts


def _dra_parts(
    plan: Plan,
    shapes: tuple[ServiceGpus, ...],
    bodies: Mapping[str, Any],
    warnings: list[str],
    known: tuple[str, ...],
) -> list[_Part]:
    """ResourceClaims naming each GPU by UUID, and Deployments whose pods use them: one
    per service, and one per simulator worker (each worker its own GPUs)."""
    claims: dict[tuple[str, ...], str] = {}
    parts: list[_Part] = []
    deployments: list[_Part] = []
    for shape in shapes:
        slots = shape.pinned if shape.replicas is not None and len(shape.pinned) > 1 else ()
        names = [(f"{shape.name}-{slot}", slot) for slot in range(1, len(slots) + 1)]
        for name, slot in names or [(shape.name, 0)]:
            uuids = shape.pinned_for(slot or 1) or ()
            extra = {"DOCKER_REPLICA_SLOT": str(slot)} if slot else {}
            if uuids:
                extra.update(CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=",".join(uuids))
            gpus = {"claims": [{"name": "gpus"}]} if uuids else None
            body = bodies[shape.name]
            pod, secret = _pod(plan, shape, name, body, warnings, gpus, extra, known)
            if uuids:
                if uuids not in claims:
                    claims[uuids] = _dns_label(f"{plan.project}-{name}-gpus")
                    parts.append((_resource_claim(plan, claims[uuids], uuids), ""))
                pod["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claims[uuids]}]
            parts.extend(secret)
            replicas = 1 if slot or shape.replicas is None else shape.replicas
            deployments.append((_deployment(plan, shape, name, replicas, pod), ""))
    for uuid in dict.fromkeys(uuid for uuids in claims for uuid in uuids):
        if len(claimed := [claim for uuids, claim in claims.items() if uuid in uuids]) > 1:
            warnings.append(
                f"GPU {uuid} is in ResourceClaims {' and '.join(claimed)}: DRA allocates a device"
                " to one claim at a time, so the pods of the other stay pending"
            )
    return [*parts, *deployments]


def _resource_claim(plan: Plan, name: str, uuids: tuple[str, ...]) -> dict[str, Any]:
    """A ResourceClaim with one request per GPU, each selecting that GPU by UUID."""
    requests = []
    for index, uuid in enumerate(uuids):
        selector = UUID_SELECTOR.format(driver=cel_string(DRA_DRIVER), uuid=cel_string(uuid))
        exactly = {
            "deviceClassName": DEVICE_CLASSES[uuid.upper().startswith("MIG-")],
            "allocationMode": "ExactCount",
            "count": 1,
            "selectors": [{"cel": {"expression": selector}}],
        }
        requests.append({"name": f"gpu-{index}", "exactly": exactly})
    return _object(plan, "ResourceClaim", name, DRA_API, spec={"devices": {"requests": requests}})


def _object(plan: Plan, kind: str, name: str, api: str = "v1", **fields: Any) -> dict[str, Any]:
    """A Kubernetes object of drgpu's stack (`name` made one Kubernetes accepts)."""
    metadata = {"name": _dns_label(name), "labels": _labels(plan)}
    return {"apiVersion": api, "kind": kind, "metadata": metadata, **fields}


def _devices(plan: Plan, shape: ServiceGpus) -> tuple[Assignment, ...]:
    """The planned GPUs a service's pods are modelled on (all workers' for the simulator)."""
    if not shape.gpus:
        return ()
    if shape.role is Role.SIMULATOR and shape.replicas is not None:
        workers = (s for s in plan.services if s.role is Role.SIMULATOR and s.has_gpu)
        return tuple({device.uuid: device for s in workers for device in s.devices}.values())
    return plan.service(shape.name).devices


def _pod(
    plan: Plan,
    shape: ServiceGpus,
    name: str,
    body: Mapping[str, Any],
    warnings: list[str],
    resources: dict[str, Any] | None,
    extra: Mapping[str, str],
    known: tuple[str, ...],
) -> tuple[dict[str, Any], list[_Part]]:
    """The pod of a service (`name`: its Deployment's): image, command, environment (`extra`
    last) and GPU `resources`; and a Secret of its secret settings, and of the variables
    holding a `known` secret value (passed on under another name), which the pod references."""
    image = body.get("image")
    if not image:
        raise ConfigError(f"service {shape.name} has no image: Kubernetes cannot build one")
    container: dict[str, Any] = {"name": _dns_label(shape.name), "image": str(image)}
    for key, field in (("entrypoint", "command"), ("command", "args")):
        if body.get(key):
            words = shlex.split(body[key]) if isinstance(body[key], str) else body[key]
            container[field] = [kubernetes_text(str(word)) for word in words]
    environment = {
        str(key): str(value)
        for key, value in (body.get("environment") or {}).items()
        if value is not None
    }
    if shape.role is Role.TRAINER_LAUNCHER:
        launcher = plan.service(shape.name)
        if dict(launcher.labels).get(FORWARDED_GPUS):  # an evaluation's starts no trainer
            warnings.append(
                f"{shape.name} starts the trainer through the Docker socket (SageMaker local"
                " mode), which Kubernetes does not offer"
            )
        # rl_coach forwards the trainer's GPU, by UUID, planned against this node.
        environment.update(launcher.environment)
    elif not shape.gpus:
        environment["NVIDIA_VISIBLE_DEVICES"] = "void"
    environment = {key: v for key, v in environment.items() if key not in extra} | dict(extra)
    if resources:
        container["resources"] = resources
    values = {key: kubernetes_text(value) for key, value in environment.items()}
    secrets = {
        key: value
        for key, value in values.items()
        if is_secret(key) or any(secret in environment[key] for secret in known)
    }
    secret = _dns_label(f"{plan.project}-{name}-secrets")
    container["env"] = [
        {"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        if key in secrets
        else {"name": key, "value": value}
        for key, value in values.items()
    ]
    document = _object(plan, "Secret", secret, type="Opaque", stringData=secrets)
    comment = SECRET_COMMENT.format(name=secret, service=name, masked="{masked}")
    return {"containers": [container]}, ([(document, comment)] if secrets else [])


def kubernetes_text(value: str) -> str:
    """A Compose value as Kubernetes must be given it: Compose's `$$` is one `$`, and a `$`
    Kubernetes would expand (`$(VAR)`) or reduce (`$$`) is written `$$`."""
    text = value.replace("$$", "$")
    return "".join(
        "$$" if char == "$" and text[index + 1 : index + 2] in ("$", "(") else char
        for index, char in enumerate(text)
    )


def _deployment(
    plan: Plan, shape: ServiceGpus, name: str, replicas: int, pod: dict[str, Any]
) -> dict[str, Any]:
    matching = {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": plan.project}
    labels = {
        **matching,
        **_labels(plan),
        "drgpu/role": shape.role.value,
        "drgpu/run-id": plan.run_id,
    }
    template = {"metadata": {"labels": labels}, "spec": pod}
    spec = {"replicas": replicas, "selector": {"matchLabels": matching}, "template": template}
    deployment = _object(plan, "Deployment", f"{plan.project}-{name}", "apps/v1", spec=spec)
    deployment["metadata"]["labels"] = labels
    return deployment


def _node_selector(
    name: str, devices: tuple[Assignment, ...], shared: bool, warnings: list[str]
) -> dict[str, str]:
    if not devices:
        return {}
    # GPU feature discovery's product label value: the NVML name with dashes for spaces.
    products = sorted({device.gpu.name.strip().replace(" ", "-") for device in devices})
    product = products[0] + (SHARED_SUFFIX if shared else "")
    if any(device.mig for device in devices):
        why = f"{name} is planned on MIG slices: with the device plugin's mig.strategy=single a"
        why += f" slice is one {GPU_RESOURCE}; no {PRODUCT_LABEL} selector is set"
    elif len(products) > 1:
        why = f"{name} is planned on GPUs of different products ({', '.join(products)}):"
        why += f" no {PRODUCT_LABEL} selector is set"
    elif not _LABEL_VALUE.match(product) or len(product) > 63:
        why = f"{product!r} is not a label value: no {PRODUCT_LABEL} selector for {name}"
    else:
        return {PRODUCT_LABEL: product}
    warnings.append(why)
    return {}


def _labels(plan: Plan) -> dict[str, str]:
    return {"app.kubernetes.io/instance": plan.project, "app.kubernetes.io/managed-by": "drgpu"}


def _dns_label(text: str) -> str:
    """A name Kubernetes accepts (RFC 1123 label): lowercase letters, digits and dashes."""
    return _NOT_DNS.sub("-", text.lower()).strip("-")[:63].rstrip("-")
