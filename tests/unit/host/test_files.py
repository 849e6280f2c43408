"""The split between reading and understanding: drgpu/core decides and parses from texts,
mappings and facts alone (none of these paths exists), and drgpu/host/files reads the
files and hands them over."""

from __future__ import annotations

from pathlib import Path

import pytest

from drgpu.core.compose_stack import ComposeText, stack_from_texts
from drgpu.core.model import HEADER_MARK, Role
from drgpu.core.settings import config_from_texts, settings_files
from drgpu.core.topology import inventory_from_text
from drgpu.errors import ConfigError
from drgpu.host.files import load_stack, override_header_template

NOWHERE = Path("/nowhere/drgpu")
SYSTEM_ENV = NOWHERE / "system.env"
RUN_ENV = NOWHERE / "run.env"
OTHER_RUN_ENV = NOWHERE / "other.env"


def test_the_run_env_beside_is_read_when_it_exists() -> None:
    chosen = settings_files(SYSTEM_ENV, None, {SYSTEM_ENV, RUN_ENV})
    assert chosen == ((SYSTEM_ENV, RUN_ENV), ())
    assert settings_files(SYSTEM_ENV, None, {SYSTEM_ENV}) == ((SYSTEM_ENV,), ())


def test_a_named_run_env_is_read_instead_of_the_one_beside() -> None:
    chosen = settings_files(SYSTEM_ENV, OTHER_RUN_ENV, {SYSTEM_ENV, RUN_ENV, OTHER_RUN_ENV})
    assert chosen == ((SYSTEM_ENV, OTHER_RUN_ENV), ())


def test_a_missing_settings_file_is_an_error_or_in_drfc_a_warning() -> None:
    with pytest.raises(ConfigError, match=f"^no settings file at {SYSTEM_ENV}$"):
        settings_files(SYSTEM_ENV, None, set())
    with pytest.raises(ConfigError, match=f"^no run settings file at {OTHER_RUN_ENV}$"):
        settings_files(SYSTEM_ENV, OTHER_RUN_ENV, {SYSTEM_ENV})
    paths, warnings = settings_files(SYSTEM_ENV, OTHER_RUN_ENV, {SYSTEM_ENV}, drfc=True)
    assert paths == (SYSTEM_ENV,)
    assert warnings == (
        f"no run settings file at {OTHER_RUN_ENV} (DR_CONFIG): read {SYSTEM_ENV} alone",
    )
    _, beside = settings_files(SYSTEM_ENV, None, {SYSTEM_ENV}, drfc=True)
    assert beside == (f"no run.env at {RUN_ENV} (DR_CONFIG is not set): read {SYSTEM_ENV} alone",)


def test_settings_come_from_texts_and_the_given_environment() -> None:
    texts = [(SYSTEM_ENV, "DR_RUN_ID=$PREFIX-1\nDR_WORKERS=2\n"), (RUN_ENV, "DR_WORKERS=3\n")]
    config = config_from_texts(texts, {"PREFIX": "abc"}, warnings=("chosen",))
    assert (config.run_id, config.workers) == ("abc-1", 3)
    assert str(config.origins["DR_WORKERS"]) == f"{RUN_ENV}:1"
    assert config.warnings == ("chosen",)


def test_a_stack_comes_from_texts_named_as_given_and_extended_as_resolved() -> None:
    named = Path("compose.yml")
    text = "services:\n  sagemaker: {image: x, gpus: all}\n"
    stack = stack_from_texts([ComposeText(named, NOWHERE / "compose.yml", text)])
    assert stack.files == (named,)
    trainer = stack.service("sagemaker")
    assert trainer is not None
    assert (trainer.role, trainer.has_gpus_key) == (Role.TRAINER, True)
    assert trainer.files == (NOWHERE / "compose.yml",)


def test_an_inventory_comes_from_text_named_by_its_source() -> None:
    assert inventory_from_text('{"gpus": []}', "box.json").gpus == ()
    with pytest.raises(ConfigError, match=r"^box\.json:1: not valid JSON"):
        inventory_from_text("{", "box.json")


def test_compose_files_are_read_in_turn_so_the_first_problem_is_reported(
    tmp_path: Path,
) -> None:
    first = tmp_path / "first.yml"
    first.write_text("volumes: {}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"^{first}: no 'services' in this compose file$"):
        load_stack([first, tmp_path / "absent.yml"])


def test_the_override_header_is_drgpus_packaged_template() -> None:
    template = override_header_template()
    assert template is not None
    assert template.startswith(HEADER_MARK)
    assert "{project}" in template
