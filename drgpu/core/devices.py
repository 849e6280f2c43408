"""The device grammar of `DR_SAGEMAKER_CUDA_DEVICES` and `DR_ROBOMAKER_CUDA_DEVICES`
(docs/settings.md). Parsing needs no machine; resolving checks a request against an inventory."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from drgpu.core.model import Assignment, Gpu, Inventory
from drgpu.core.numbers import is_digits, whole_number
from drgpu.core.topology import pci_bus_id


class SelectorKind(str, Enum):
    """The forms a single device token can take."""

    INDEX = "index"
    GPU_UUID = "gpu-uuid"
    MIG_UUID = "mig-uuid"
    PCI_BUS_ID = "pci-bus-id"
    CUDA_ORDINAL = "cuda-ordinal"  # torch's `cuda:N`: only ever named, to say what to write


@dataclass(frozen=True)
class Selector:
    """One token of a device list, as written and as understood."""

    kind: SelectorKind
    text: str
    key: str

    @property
    def index(self) -> int:
        """The number a bare index (or `cuda:N`) names (leading zeros never count)."""
        return int(self.key.split(":", 1)[1])


@dataclass(frozen=True)
class DeviceRequest:
    """A parsed `*_CUDA_DEVICES` value."""

    all: bool = False
    selectors: tuple[Selector, ...] = ()
    auto: bool = False

    @property
    def wants_gpu(self) -> bool:
        """Whether the service asks for any GPU at all."""
        return self.all or self.auto or bool(self.selectors)


NO_GPU = DeviceRequest()

_CUDA_PREFIX = re.compile(r"^\s*cuda\s*:\s*(?P<rest>.*)$", re.IGNORECASE)
_UUID = re.compile(
    r"^(?P<prefix>GPU|MIG)-(?P<body>(?:GPU-)?[0-9a-fA-F][0-9a-fA-F/-]*)$", re.IGNORECASE
)


class DeviceSyntaxError(ValueError):
    """A device value that does not parse; the message is one line."""


def parse_devices(value: str) -> DeviceRequest:
    """Parse a device value, or raise `DeviceSyntaxError` saying exactly what is wrong."""
    text = value.strip()
    if (word := text.lower()) in ("", "none", "void", "all", "auto"):
        return DeviceRequest(all=word == "all", auto=word == "auto")
    tokens = [token.strip() for token in text.split(",")]
    if "" in tokens:
        cleaned = ",".join(token for token in tokens if token)
        raise DeviceSyntaxError(f"{text!r} has an empty entry between commas: write {cleaned!r}")
    selectors = tuple(_parse_token(token) for token in tokens)
    seen: dict[str, str] = {}
    for selector in selectors:
        if selector.key in seen:
            raise DeviceSyntaxError(
                f"{text!r} names the same device twice ({seen[selector.key]!r}"
                f" and {selector.text!r})"
            )
        seen[selector.key] = selector.text
    return DeviceRequest(selectors=selectors)


# NVML numbers at most a few dozen GPUs per machine; any index past this is a typo.
MAX_INDEX = 1023


def _parse_token(token: str) -> Selector:
    if (cuda := _CUDA_PREFIX.match(token)) is not None:
        ordinal = whole_number(cuda["rest"].strip(), 0, MAX_INDEX)
        if ordinal is None:
            raise DeviceSyntaxError(
                f"{token!r} is not a device (torch's 'cuda:N' device strings do not belong"
                " here): write an nvidia-smi index (0, 1, ...) or a GPU UUID"
            )
        return Selector(SelectorKind.CUDA_ORDINAL, token, f"cuda:{ordinal}")
    if is_digits(token):
        index = whole_number(token, 0, MAX_INDEX)
        if index is None:
            shown = token if len(token) <= 12 else f"{token[:12]}... ({len(token)} digits)"
            raise DeviceSyntaxError(
                f"{shown!r} is not a GPU index: indices go from 0 to {MAX_INDEX}"
            )
        return Selector(SelectorKind.INDEX, token, f"index:{index}")
    if token[:1] == "-" and is_digits(token[1:]):
        raise DeviceSyntaxError(f"{token[:12]!r}: GPU indices start at 0 and cannot be negative")
    if token.lower() in ("all", "none", "auto"):
        raise DeviceSyntaxError(f"{token!r} cannot be combined with other devices")
    if (uuid := _UUID.match(token)) is not None:
        kind = SelectorKind.MIG_UUID if uuid["prefix"].upper() == "MIG" else SelectorKind.GPU_UUID
        return Selector(kind, token, f"uuid:{token.lower()}")
    if (bus := pci_bus_id(token)) is not None:
        return Selector(SelectorKind.PCI_BUS_ID, token, f"pci:{bus}")
    shown = token if len(token) <= 60 else f"{token[:60]}... ({len(token)} characters)"
    raise DeviceSyntaxError(
        f"{shown!r} is not a device: use an nvidia-smi index (0, 1, ...), a GPU UUID"
        " (GPU-...), a MIG UUID (MIG-...), a PCI bus id (81:00.0), 'all', 'auto' or 'none'"
    )


def resolve(request: DeviceRequest, inventory: Inventory) -> tuple[list[Assignment], list[str]]:
    """The devices a request names on a machine (`auto`: none), and every problem found."""
    if request.all:  # every GPU not lost, or its MIG devices when in MIG mode
        return [
            Assignment(gpu, mig)
            for gpu in inventory.gpus
            if not gpu.lost
            for mig in (gpu.mig_devices if gpu.mig_mode else (None,))
        ], []
    assignments: list[Assignment] = []
    problems: list[str] = []
    for selector in request.selectors:
        found = _resolve_one(selector, inventory)
        if isinstance(found, str):
            problems.append(found)
        elif any(found.uuid == other.uuid for other in assignments):
            problems.append(f"{selector.text!r} names a device already in the list")
        else:
            assignments.append(found)
    return assignments, problems


def describe_inventory(inventory: Inventory) -> str:
    """One line listing what exists: index, name, memory and bus id of each GPU."""
    if not inventory.gpus:
        return "this machine has no GPU"
    return "this machine has " + ", ".join(describe_gpu(gpu) for gpu in inventory.gpus)


def describe_gpu(gpu: Gpu) -> str:
    """`1: Tesla M40 24GB (22912 MiB, 00000000:81:00.0)`; another Swarm node's (index -1,
    named after its node): `GPU-... on node vm (5oeuy38bigky)`."""
    if gpu.index < 0:
        return f"{gpu.uuid} {gpu.name}"
    if gpu.lost:
        return f"{gpu.index}: lost GPU ({gpu.pci_bus_id or 'bus id unknown'})"
    return f"{gpu.index}: {gpu.name} ({gpu.memory_total_mib} MiB, {gpu.pci_bus_id})"


def _resolve_one(selector: Selector, inventory: Inventory) -> Assignment | str:
    """The device `selector` names (an exact UUID, else every UUID it starts), or why none."""
    mig = selector.kind is SelectorKind.MIG_UUID
    if selector.kind is SelectorKind.INDEX:
        matches = [Assignment(gpu) for gpu in inventory.gpus if gpu.index == selector.index]
    elif selector.kind is SelectorKind.PCI_BUS_ID:
        matches = [Assignment(g) for g in inventory.gpus if f"pci:{g.pci_bus_id}" == selector.key]
    else:
        prefix = selector.text.lower()
        candidates = (
            [Assignment(gpu, m) for gpu in inventory.gpus if gpu.mig_mode for m in gpu.mig_devices]
            if mig
            else [Assignment(gpu) for gpu in inventory.gpus]
        )
        matches = [one for one in candidates if one.uuid.lower().startswith(prefix)]
        matches = [one for one in matches if one.uuid.lower() == prefix] or matches
    if not matches:
        what = "MIG device" if mig else "GPU"
        return f"no {what} matches {selector.text!r}; {describe_inventory(inventory)}"
    if len(matches) > 1:
        names = ", ".join(found.uuid for found in matches)
        return f"{selector.text!r} is ambiguous: it matches {names}"
    if mig:
        return matches[0]
    gpu = matches[0].gpu
    if gpu.lost:
        where = gpu.pci_bus_id or "bus id unknown"
        return f"GPU {gpu.index} ({where}) is lost: NVML cannot reach it"
    if gpu.mig_mode:
        migs = ", ".join(mig.uuid for mig in gpu.mig_devices) or "none configured"
        return (
            f"GPU {gpu.index} ({gpu.name}) is in MIG mode and cannot be given whole:"
            f" ask for one of its MIG devices ({migs})"
        )
    return matches[0]
