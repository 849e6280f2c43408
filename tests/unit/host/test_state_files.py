"""drgpu's own files: a failed `up` leaves none of them, and never removes another's."""

from __future__ import annotations

from pathlib import Path

import pytest

from drgpu.core.inputs import STATE_DIR
from drgpu.core.model import HEADER_MARK
from drgpu.host.state_files import new_state_dir, removed_on_failure, write_owned_file


class Failed(Exception):
    """A failure inside the block."""


def test_a_failure_removes_what_drgpu_wrote_and_the_folder_it_made(tmp_path: Path) -> None:
    env_file = tmp_path / "system.env"
    made = new_state_dir(env_file)
    assert made == tmp_path / STATE_DIR
    written = made / "deepracer-0.override.yml"
    with pytest.raises(Failed), removed_on_failure(made=made), removed_on_failure(written):
        write_owned_file(written, f"{HEADER_MARK}\n")
        raise Failed
    assert not made.exists()


def test_a_file_that_was_there_stays_and_so_does_its_folder(tmp_path: Path) -> None:
    earlier = tmp_path / STATE_DIR / "deepracer-0.override.yml"
    write_owned_file(earlier, f"{HEADER_MARK}\nold\n")
    assert new_state_dir(tmp_path / "system.env") is None  # (there before)
    with pytest.raises(Failed), removed_on_failure(earlier):
        write_owned_file(earlier, f"{HEADER_MARK}\nnew\n")
        raise Failed
    assert earlier.is_file()


def test_a_file_drgpu_did_not_write_is_never_removed(tmp_path: Path) -> None:
    made = new_state_dir(tmp_path / "system.env")
    theirs = tmp_path / STATE_DIR / "deepracer-0.swarm.yml"
    with pytest.raises(Failed), removed_on_failure(made=made), removed_on_failure(theirs):
        theirs.write_text("mine\n")
        raise Failed
    assert theirs.read_text() == "mine\n"
    assert made is not None and made.is_dir()  # not empty: kept


def test_success_keeps_everything(tmp_path: Path) -> None:
    made = new_state_dir(tmp_path / "system.env")
    written = tmp_path / STATE_DIR / "deepracer-0.override.yml"
    with removed_on_failure(made=made), removed_on_failure(written):
        write_owned_file(written, f"{HEADER_MARK}\n")
    assert written.is_file()
