"""Reading the user's compose files: roles, merging across files, and bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from drgpu.core.compose_stack import StackService, role_of
from drgpu.core.model import Role
from drgpu.errors import ConfigError
from drgpu.host.files import base_stack_file, load_stack


def compose(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("sagemaker", Role.TRAINER),
        ("rl_coach", Role.TRAINER_LAUNCHER),
        ("robomaker", Role.SIMULATOR),
        ("robomaker-3", Role.SIMULATOR),
        ("robomaker_3", Role.OTHER),
        ("drgpu-mps", Role.MPS_DAEMON),
        ("minio", Role.OTHER),
    ],
)
def test_roles_come_from_deepracer_for_clouds_service_names(name: str, role: Role) -> None:
    assert role_of(name) is role


def test_base_stack_has_a_trainer_and_a_simulator() -> None:
    base = base_stack_file()
    keys = frozenset({"image", "init", "environment"})
    stack = load_stack([base])
    assert stack.services == (
        StackService("sagemaker", Role.TRAINER, files=(base,), keys=keys),
        StackService("robomaker", Role.SIMULATOR, files=(base,), keys=keys),
    )


def test_gpu_settings_are_merged_across_files_in_order(tmp_path: Path) -> None:
    first = compose(tmp_path, "a.yml", "services:\n  robomaker: {gpus: all}\n  minio: {}\n")
    second = compose(
        tmp_path,
        "b.yml",
        "services:\n  sagemaker:\n    deploy: !override\n"
        "      resources: {reservations: {devices: [{driver: nvidia}]}}\n",
    )
    stack = load_stack([first, second])
    assert stack.files == (first, second)
    assert stack.services == (
        StackService(
            "robomaker", Role.SIMULATOR, has_gpus_key=True, files=(first,), keys=frozenset({"gpus"})
        ),
        StackService("minio", Role.OTHER, files=(first,)),
        StackService(
            "sagemaker",
            Role.TRAINER,
            has_device_requests=True,
            files=(second,),
            keys=frozenset({"deploy"}),
        ),
    )


def test_each_service_knows_the_files_that_define_it_as_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compose(tmp_path, "a.yml", "services:\n  robomaker: {image: sim}\n")
    compose(tmp_path, "b.yml", "services:\n  robomaker: {environment: {A: b}}\n  minio: {}\n")
    monkeypatch.chdir(tmp_path)
    stack = load_stack([Path("a.yml"), Path("b.yml")])
    robomaker = stack.service("robomaker")
    assert robomaker is not None
    assert robomaker.files == (tmp_path / "a.yml", tmp_path / "b.yml")
    assert robomaker.keys == {"image", "environment"}
    assert stack.service("absent") is None


@pytest.mark.parametrize(
    ("name", "slot"), [("robomaker-3", 3), ("robomaker-12", 12), ("robomaker", None), ("x-1", None)]
)
def test_worker_slots_come_from_numbered_robomakers(name: str, slot: int | None) -> None:
    assert StackService(name, role_of(name)).worker_slot == slot


def test_invalid_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    path = compose(tmp_path, "c.yml", "services:\n  a: {image: x}\n  b: [\n")
    with pytest.raises(ConfigError, match=r"c\.yml:4: not valid YAML"):
        load_stack([path])


def test_file_without_services_is_refused(tmp_path: Path) -> None:
    path = compose(tmp_path, "c.yml", "volumes: {}\n")
    with pytest.raises(ConfigError, match="no 'services' in this compose file"):
        load_stack([path])


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read compose file"):
        load_stack([tmp_path / "absent.yml"])


def test_binary_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "c.yml"
    path.write_bytes(b"\xff\xfeservices")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_stack([path])
