"""`drgpu swarm-setup`'s report: what a node needs so that Swarm hands out its GPUs (each one
advertised by UUID, the NVIDIA runtime by default, config.toml's swarm-resource: docs/swarm.md),
and what differs from what `commands.swarm_setup` read; and how a stack's tasks get GPUs."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drgpu.core.devices import DeviceRequest, SelectorKind
from drgpu.core.findings import Finding, Level
from drgpu.core.labels import split_list
from drgpu.core.model import Inventory
from drgpu.core.modes import SwarmGpus, choices, member
from drgpu.core.placement import locate
from drgpu.errors import CheckFailedError, ConfigError

if TYPE_CHECKING:
    from drgpu.core.facts import EngineFacts, TaskFacts
    from drgpu.core.toolkit import ToolkitFacts

# Swarm's GPU conventions: the resource kind, the variable the engine sets, the node labels.
GPU_KIND = "NVIDIA-GPU"
RESOURCE_VARIABLE = f"DOCKER_RESOURCE_{GPU_KIND}"
NODE_LABELS = ("Sagemaker", "Robomaker")  # the trainer's node, the simulators' nodes
TRAINER_CONSTRAINT, SIMULATOR_CONSTRAINT = (f"node.labels.{label} == true" for label in NODE_LABELS)
RUNTIME = "nvidia"
TOOLKIT_LINE = f'swarm-resource = "{RESOURCE_VARIABLE}"'
MODE_LINES = ("[nvidia-container-runtime]", 'mode = "legacy"')


def reserved_gpus(task: TaskFacts) -> tuple[str, ...]:
    """The GPUs the engine reserved for a task (its NVIDIA-GPU generic resources)."""
    return tuple(value for kind, value in task.generic_resources if kind == GPU_KIND)


OK, FAIL, NOTE = Level.OK, Level.FAIL, Level.NOTE  # FAIL: the node differs, and must change


@dataclass(frozen=True)
class NodeState:
    """What was found on the node; a `*_problem` says why a part could not be read."""

    daemon_json: Mapping[str, Any] | None
    daemon_json_problem: str | None
    toolkit: ToolkitFacts
    toolkit_problem: str | None
    engine: EngineFacts | None
    engine_problem: str | None


@dataclass(frozen=True)
class SetupReport:
    """The settings the node needs, and how the node differs from them."""

    resources: tuple[str, ...]
    daemon_json_path: Path
    daemon_json: Mapping[str, Any]
    toolkit_path: Path
    findings: tuple[Finding, ...]

    @property
    def failure(self) -> CheckFailedError | None:
        """Exit 6 when daemon.json, the NVIDIA runtime's config or the engine differ."""
        differing = [f for f in self.findings if f.level == FAIL]
        if not differing:
            return None
        return CheckFailedError(
            f"this node is not set up for Swarm GPUs: {len(differing)} difference(s)"
            f", first: {differing[0].subject}: {differing[0].message}"
        )


def wanted_resources(inventory: Inventory, kept: Collection[str] = ()) -> tuple[str, ...]:
    """`NVIDIA-GPU=<uuid>` for each usable GPU (each MIG slice of one in MIG mode) but the
    trainer's (`kept`, GPU or MIG UUIDs): the engine may give a simulator any a node advertises."""
    return tuple(
        f"{GPU_KIND}={uuid}"
        for gpu in inventory.gpus
        if not gpu.lost and gpu.uuid not in kept
        for uuid in ([mig.uuid for mig in gpu.mig_devices] if gpu.mig_mode else [gpu.uuid])
        if uuid not in kept
    )


def runs_trainer(engine: EngineFacts | None, trainer: DeviceRequest, inventory: Inventory) -> bool:
    """Whether the trainer may run on this node: in a swarm on a manager only (`drgpu up`
    pins it to the manager it runs on); elsewhere (not joined yet, engine unknown) unless
    its GPUs are named by UUIDs none of which is this node's (another node's trainer)."""
    if engine is not None and engine.swarm_state == "active":
        return engine.node_labels is not None  # node labels are a manager's to read
    kinds = (SelectorKind.GPU_UUID, SelectorKind.MIG_UUID)
    uuids = [s.text for s in trainer.selectors if s.kind in kinds]
    foreign = uuids and len(uuids) == len(trainer.selectors)
    return not (foreign and not any(locate(uuid, inventory) for uuid in uuids))


def report(
    resources: tuple[str, ...],
    state: NodeState,
    daemon_json_path: Path,
    toolkit_path: Path,
    *,
    kept: Collection[str] = (),
    trainer_here: bool = True,
) -> SetupReport:
    """Compare the node with what it needs (`kept`: the trainer's GPUs, never advertised;
    `trainer_here`: whether the trainer may run on this node)."""
    findings = [
        *_daemon_json_findings(resources, state, daemon_json_path, kept),
        *_toolkit_findings(state, toolkit_path),
        *_engine_findings(resources, state, kept),
    ]
    trainer = partial(Finding, "trainer", NOTE, kind="trainer")
    findings += [trainer(f"{uuid} is the trainer's: not advertised to Swarm") for uuid in kept]
    if not trainer_here:  # then none is kept
        every = "(a worker, or its GPUs are another node's), so every GPU is advertised"
        findings.append(trainer(f"the trainer does not run on this node {every}"))
    if not resources:
        none = "this node has no usable GPU to advertise"
        findings.insert(0, Finding("GPUs", FAIL, none, kind="node-gpus"))
    wanted = _wanted_daemon_json(state.daemon_json or {}, resources)
    return SetupReport(resources, daemon_json_path, wanted, toolkit_path, tuple(findings))


def _gpu_entries(entries: Iterable[str]) -> tuple[list[str], list[str]]:
    """Entries of kind NVIDIA-GPU, and entries of another kind whose value is a GPU UUID."""
    ours, misnamed = [], []
    for entry in entries:
        kind, _, value = entry.partition("=")
        if kind == GPU_KIND:
            ours.append(entry)
        elif value[:4].upper() in ("GPU-", "MIG-"):
            misnamed.append(entry)
    return ours, misnamed


def _resource_findings(
    said: Callable[..., Finding],
    resources: tuple[str, ...],
    have: Iterable[str],
    fix: str,
    kept: Collection[str],
) -> list[Finding]:
    """How the advertised entries `have` differ from `resources`, each `said` as a level and a
    message (`fix`: for those missing)."""
    ours, misnamed = _gpu_entries(have)
    trainers = [entry for entry in ours if entry.partition("=")[2] in kept]
    extra = [entry for entry in ours if entry not in resources and entry not in trainers]
    wrong = f"is not {GPU_KIND!r}, the kind drgpu's stacks reserve and that {RESOURCE_VARIABLE}"
    rows = [  # (before, entries, after) of each difference
        *(("", [e], f": kind {e.partition('=')[0]!r} {wrong} is named after") for e in misnamed),
        ("", trainers, ": the trainer's GPU; the engine may give it to a simulator: remove it"),
        ("missing ", [entry for entry in resources if entry not in ours], f"; {fix}"),
        ("", extra, ": not a GPU of this node (full UUIDs)"),
    ]
    differences = [f"{before}{', '.join(e)}{after}" for before, e, after in rows if e]
    return [said(FAIL, text) for text in differences] or [
        said(OK, f"{len(ours)} {GPU_KIND} resource(s), one per GPU")
    ]


def _daemon_json_findings(
    resources: tuple[str, ...], state: NodeState, path: Path, kept: Collection[str]
) -> list[Finding]:
    if (document := state.daemon_json) is None:
        why = state.daemon_json_problem or "cannot be read"
        return [Finding(str(path), FAIL, why, kind="daemon-json")]
    have = [str(entry) for entry in document.get("node-generic-resources") or []]
    said = partial(Finding, f"{path}: node-generic-resources", kind="daemon-json-resources")
    findings = _resource_findings(said, resources, have, "add them", kept)
    runtime = document.get("default-runtime")
    why = f"{runtime or 'unset (runc)'}; Swarm cannot choose a runtime per service, so it must be"
    said = partial(Finding, f"{path}: default-runtime", kind="daemon-json-runtime")
    findings.append(said(OK, RUNTIME) if runtime == RUNTIME else said(FAIL, f"{why} {RUNTIME!r}"))
    if RUNTIME not in (document.get("runtimes") or {}):
        missing = f"no {RUNTIME!r} runtime entry"
        findings.append(Finding(f"{path}: runtimes", FAIL, missing, kind="daemon-json-runtimes"))
    return findings


def _toolkit_findings(state: NodeState, path: Path) -> list[Finding]:
    """config.toml's swarm-resource, then the toolkit's version and mode: 1.18.x in jit-cdi
    mode (its default) ignores swarm-resource, so reserving tasks would get no GPU."""
    from drgpu.core.toolkit import MODE_FIX, generic_resources_problem  # lazy: swarm-setup's

    toolkit = state.toolkit
    said = partial(Finding, f"{path}: swarm-resource", kind="toolkit-swarm-resource")
    if state.toolkit_problem is not None:
        found = said(FAIL, state.toolkit_problem)
    elif (swarm_resource := toolkit.swarm_resource) is None:
        found = said(FAIL, f"not set (the shipped file has it commented out); add {TOOLKIT_LINE}")
    elif RESOURCE_VARIABLE in split_list(swarm_resource):
        found = said(OK, swarm_resource)
    else:
        why = "nvidia-container-toolkit#57"
        sets = f"the engine sets {RESOURCE_VARIABLE} for kind {GPU_KIND} ({why})"
        found = said(FAIL, f"{swarm_resource!r}: {sets}; write {TOOLKIT_LINE}")
    if toolkit.version is None and not toolkit.config_found:
        return [found]  # no toolkit here: the swarm-resource finding says config.toml is absent
    mode = partial(Finding, f"{path}: mode", kind="toolkit-mode")
    if (problem := generic_resources_problem(toolkit)) is not None:
        return [found, mode(FAIL, problem)]
    if toolkit.effective_mode is None:  # neither version nor mode known
        unknown = "the toolkit's version is unknown, so is the runtime's mode (1.18.x runs"
        note = f"{unknown} jit-cdi where no mode is written, ignoring swarm-resource)"
        return [found, mode(NOTE, f"{note}: to be sure, {MODE_FIX}, or use toolkit 1.19+")]
    return [found, mode(OK, f"toolkit {toolkit.version_text}, mode {toolkit.effective_mode}")]


def _engine_findings(
    resources: tuple[str, ...], state: NodeState, kept: Collection[str]
) -> list[Finding]:
    if (engine := state.engine) is None:
        why = state.engine_problem or "cannot reach the Docker engine"
        return [Finding("engine", FAIL, why, kind="engine")]
    restart = "dockerd advertises what daemon.json said when it started: restart dockerd"
    said = partial(Finding, "engine: generic resources", kind="engine-resources")
    findings = _resource_findings(said, resources, engine.generic_resources, restart, kept)
    absent = "" if RUNTIME in engine.runtimes else f"; no {RUNTIME!r} runtime"
    runtime = engine.default_runtime
    said = partial(Finding, "engine: default runtime", kind="engine-runtime")
    findings.append(said(OK, RUNTIME) if runtime == RUNTIME else said(FAIL, runtime + absent))
    if engine.swarm_state != "active":
        joined = f"{engine.swarm_state}: `docker swarm init` or `join`"
        findings.append(Finding("engine: swarm", FAIL, joined, kind="engine-swarm"))
    elif engine.node_labels is not None:
        found = [f"{k}={engine.node_labels[k]}" for k in NODE_LABELS if k in engine.node_labels]
        none = f"no {' or '.join(NODE_LABELS)} label: no drgpu service is placed here"
        labelled = ", ".join(found) or none
        findings.append(Finding("engine: node labels", NOTE, labelled, kind="node-labels"))
    return findings


def _wanted_daemon_json(existing: Mapping[str, Any], resources: tuple[str, ...]) -> dict[str, Any]:
    """The node's daemon.json with drgpu's keys set (other keys and resources kept)."""
    have = [str(entry) for entry in existing.get("node-generic-resources") or []]
    ours, misnamed = _gpu_entries(have)
    others = [entry for entry in have if entry not in ours and entry not in misnamed]
    runtimes = dict(existing.get("runtimes") or {})
    runtimes.setdefault(RUNTIME, {"path": "nvidia-container-runtime", "runtimeArgs": []})
    return {
        **existing,
        "default-runtime": RUNTIME,
        "runtimes": runtimes,
        "node-generic-resources": [*others, *resources],
    }


SWARM_GPUS_KEY = "DRGPU_SWARM_GPUS"
PINNED_VARIABLE = "NVIDIA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class SwarmLayout:
    """How a stack's GPU tasks get their GPUs on the swarm (docs/swarm.md): pinned to this node
    (`node_id`, when known) in NVIDIA_VISIBLE_DEVICES, as the trainer always is, or, for the
    simulators unless `pin_simulators`, by the engine among the GPUs nodes advertise."""

    pin_simulators: bool = True
    node_id: str | None = None
    advertised: tuple[str, ...] = ()


def swarm_layout(values: Mapping[str, str], engine: EngineFacts | None) -> SwarmLayout:
    """The layout `DRGPU_SWARM_GPUS` asks for on this swarm (`engine`: None when unknown):
    `auto` pins the simulators unless another node carries the simulator label, as `pin` does
    always and `generic` never. A Compose stack ignores the key."""
    mode = (values.get(SWARM_GPUS_KEY) or "auto").strip().lower() or "auto"
    if (setting := member(SwarmGpus, mode)) is None:
        raise ConfigError(f"{SWARM_GPUS_KEY}={mode!r}: expected one of {choices(SwarmGpus)}")
    if engine is None:
        return SwarmLayout(pin_simulators=setting != SwarmGpus.GENERIC)
    advertised = tuple(
        entry.partition("=")[2] for entry in _gpu_entries(engine.generic_resources)[0]
    )
    others = any(
        node.id != engine.node_id and node.labels.get(NODE_LABELS[1]) == "true"
        for node in engine.nodes
    )
    pin = setting == SwarmGpus.PIN or (setting == SwarmGpus.AUTO and not others)
    return SwarmLayout(pin_simulators=pin, node_id=engine.node_id or None, advertised=advertised)
