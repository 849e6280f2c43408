"""The compose stack drgpu works on: which files, which services, what each already asks for.
A service's role comes from DeepRacer-for-cloud's service names, or from the compose file
itself, which wins: a `drgpu.role` label or `x-drgpu: {role: ...}` (docs/settings.md)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from drgpu.core.labels import ROLE as ROLE_LABEL
from drgpu.core.model import Role
from drgpu.errors import ConfigError

SIMULATOR_SERVICE = "robomaker"
MPS_DAEMON_SERVICE = "drgpu-mps"
_SIMULATOR = r"^robomaker(-(?P<slot>[0-9]+))?$"  # compiled when first used (`re` caches it)
EXTENSION = "x-drgpu"
EXTENSION_ROLE = f"{EXTENSION}.role"
_LABEL_SOURCE = f"{ROLE_LABEL} label"
# What a compose file may declare: trainer, simulator or none, or any role's value drgpu
# writes in its containers' `drgpu.role` label (`other` is none; `mps-daemon`, drgpu-mps's).
DECLARED_ROLES = {"none": Role.OTHER, **{role.value: role for role in Role}}
ROLE_VALUES = "trainer, simulator or none"
Declared = tuple[Role, str]  # a role a compose file declares for a service, and where


@dataclass(frozen=True)
class StackService:
    """What drgpu needs to know of one service of the user's compose files."""

    name: str
    role: Role
    has_device_requests: bool = False
    has_gpus_key: bool = False
    files: tuple[Path, ...] = ()
    keys: frozenset[str] = frozenset()
    role_source: str = "by its name"  # or where its compose files declare its role

    @property
    def worker_slot(self) -> int | None:
        """N of a numbered simulator `robomaker-N`; None for any other service."""
        match = re.match(_SIMULATOR, self.name)
        return int(match["slot"]) if match and match["slot"] else None


@dataclass(frozen=True)
class Stack:
    """The compose files of a stack and the services they define, in order of appearance."""

    files: tuple[Path, ...]
    services: tuple[StackService, ...]

    def names(self, role: Role) -> list[str]:
        """The services of one role."""
        return [service.name for service in self.services if service.role is role]

    def service(self, name: str) -> StackService | None:
        """The service called `name`, if the stack defines it."""
        return next((service for service in self.services if service.name == name), None)


_NAMED_ROLES = {
    "sagemaker": Role.TRAINER,
    "rl_coach": Role.TRAINER_LAUNCHER,
    MPS_DAEMON_SERVICE: Role.MPS_DAEMON,
}


def role_of(name: str) -> Role:
    """The role a service plays, from DeepRacer-for-cloud's service names."""
    return Role.SIMULATOR if re.match(_SIMULATOR, name) else _NAMED_ROLES.get(name, Role.OTHER)


@dataclass(frozen=True)
class ComposeText:
    """One compose file as read: its path as named (for messages), resolved, and its text."""

    path: Path
    resolved: Path
    text: str


def stack_from_texts(files: Iterable[ComposeText]) -> Stack:
    """The services of compose files, in order, merged by name as compose merges them."""
    paths: list[Path] = []
    services: dict[str, StackService] = {}
    declared: dict[str, dict[str, Declared]] = {}  # each service's roles, by where declared
    for file in files:
        paths.append(file.path)
        for name, written in _services_of(file.path, file.text).items():
            body: dict[str, Any] = written if isinstance(written, dict) else {}
            previous = services.get(name, StackService(name=name, role=role_of(name)))
            node: Any = body  # down to deploy.resources.reservations
            for key in ("deploy", "resources", "reservations"):
                node = node.get(key) if isinstance(node, dict) else None
            declared.setdefault(name, {}).update(_declared_roles(file.path, name, body))
            services[name] = replace(
                previous,
                has_device_requests=previous.has_device_requests
                or (isinstance(node, dict) and bool(node.get("devices"))),
                has_gpus_key=previous.has_gpus_key or bool(body.get("gpus")),
                files=(*previous.files, file.resolved),
                keys=previous.keys | frozenset(body),
            )
    return Stack(
        files=tuple(paths),
        services=tuple(_with_declared(s, declared[s.name]) for s in services.values()),
    )


def _declared_roles(path: Path, name: str, body: dict[str, Any]) -> dict[str, Declared]:
    """The roles one file declares for a service: by label, and by extension field."""
    labels = body.get("labels")
    if isinstance(labels, list):  # `KEY=VALUE` entries, the last of a key counts
        labels = {key.strip(): value for key, _, value in (str(e).partition("=") for e in labels)}
    extension = body.get(EXTENSION)
    if not isinstance(extension, dict | None):
        raise ConfigError(
            f"{path}: service {name}: {EXTENSION} must be a mapping, like {{role: trainer}}"
        )
    if unknown := sorted(str(key) for key in extension or {} if key != "role"):
        raise ConfigError(
            f"{path}: service {name}: {EXTENSION} has no key {unknown[0]!r}"
            " (drgpu reads only 'role')"
        )
    return {
        **_declared(path, name, _LABEL_SOURCE, labels, ROLE_LABEL),
        **_declared(path, name, EXTENSION_ROLE, extension, "role"),
    }


def _declared(path: Path, name: str, source: str, written: Any, key: str) -> dict[str, Declared]:
    """The role `written[key]` (a label or field) declares, checked, by `source`."""
    if not isinstance(written, dict) or key not in written:
        return {}
    value = "" if written[key] is None else str(written[key]).strip()
    if (role := DECLARED_ROLES.get(value.lower())) is None:
        variable = "; drgpu reads it as written, without variables" if "$" in value else ""
        raise ConfigError(
            f"{path}: service {name}: {source} {value!r} is not one of {ROLE_VALUES}{variable}"
        )
    if (name == MPS_DAEMON_SERVICE) != (role is Role.MPS_DAEMON):
        raise ConfigError(
            f"{path}: service {name}: {source} {value!r}: only drgpu's own"
            f" {MPS_DAEMON_SERVICE} service is the MPS daemon, and it has no other role"
        )
    return {source: (role, f"{source} {value.lower()!r} ({path})")}


def _with_declared(service: StackService, roles: dict[str, Declared]) -> StackService:
    """The service with the role its compose files declare (label and field must agree)."""
    label, extension = roles.get(_LABEL_SOURCE), roles.get(EXTENSION_ROLE)
    if label and extension and label[0] is not extension[0]:
        raise ConfigError(
            f"service {service.name} has two roles: {label[1]} and {extension[1]}",
            hint=f"declare one role, with the label {ROLE_LABEL} or with {EXTENSION_ROLE}",
        )
    if (declared := label or extension) is None:
        return service
    return replace(service, role=declared[0], role_source=declared[1])


def _services_of(path: Path, text: str) -> dict[str, Any]:
    """The `services` of one compose file's text (compose's merge tags read as plain)."""
    import yaml  # PyYAML takes a while to import: only when a compose file is read

    class _Loader(yaml.CSafeLoader):  # libyaml's parser: ten times quicker than PyYAML's
        pass

    def _untagged(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node)
        return loader.construct_scalar(node)  # type: ignore[arg-type]

    _Loader.add_constructor("!reset", _untagged)
    _Loader.add_constructor("!override", _untagged)
    try:
        document = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{line}: not valid YAML") from None
    services = document.get("services") if isinstance(document, dict) else None
    if not isinstance(services, dict):
        raise ConfigError(f"{path}: no 'services' in this compose file")
    return services
