"""A user without Docker access must not get a root container through a shared `.drgpu`
(issue 23, defect 1): drgpu trusts its folder only when it and every folder above it
belong to this user or root and nobody else can write them (sticky folders like /tmp,
and a user-private group, aside). In-process, as root; the attack itself by a second
user is on the bed (test_shared_folder_attack.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from drgpu.errors import ConfigError, ExitCode
from drgpu.host.state_files import state_dir, write_owned_file
from tests.adversarial.helpers import GTX_M40, SECRET, assert_sound
from tests.support.runners import run_main

NOBODY = 65534


pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: files of another user"),
    pytest.mark.usefixtures("no_engine"),
]


def shared(tmp_path: Path, mode: int) -> Path:
    """A settings folder of this mode, holding a system.env."""
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(mode)
    (folder / "system.env").write_text(
        f"AWS_SECRET_ACCESS_KEY={SECRET}\nDR_SAGEMAKER_CUDA_DEVICES=none\n"
    )
    return folder


def planted(folder: Path) -> Path:
    """What the other user does: `.drgpu` first, mode 777, with a fake override in it."""
    drgpu = folder / ".drgpu"
    drgpu.mkdir()
    drgpu.chmod(0o777)
    fake = drgpu / "deepracer-0.override.yml"
    fake.write_text("# Written by drgpu for compose project deepracer-0.\nservices: {}\n")
    for path in (drgpu, fake):
        os.chown(path, NOBODY, NOBODY)
    return fake


@pytest.mark.parametrize("mode", [0o1777, 0o755, 0o777])
@pytest.mark.parametrize("command", ["up", "down"])
def test_a_drgpu_folder_of_another_user_is_refused(tmp_path: Path, mode: int, command: str) -> None:
    folder = shared(tmp_path, mode)
    fake = planted(folder)
    before = fake.read_bytes()
    ran = run_main(command, "--env-file", folder / "system.env")
    assert_sound(ran, ExitCode.CONFIG)
    assert f"{folder / '.drgpu'} belongs to nobody (uid {NOBODY}), not to you or root" in ran.err
    assert fake.read_bytes() == before


def test_a_drgpu_folder_of_ours_others_can_write_is_refused(tmp_path: Path) -> None:
    folder = shared(tmp_path, 0o755)
    (folder / ".drgpu").mkdir()
    (folder / ".drgpu").chmod(0o777)
    ran = run_main("up", "--env-file", folder / "system.env")
    assert_sound(ran, ExitCode.CONFIG)
    assert f"{folder / '.drgpu'} is writable by everybody (mode 0777)" in ran.err
    assert f"chmod go-w {folder / '.drgpu'}" in ran.err


def test_a_world_writable_settings_folder_without_the_sticky_bit_is_refused(
    tmp_path: Path,
) -> None:
    folder = shared(tmp_path, 0o777)
    ran = run_main("up", "--env-file", folder / "system.env")
    assert_sound(ran, ExitCode.CONFIG)
    assert f"{folder} is writable by everybody (mode 0777)" in ran.err
    assert not (folder / ".drgpu").exists()


def test_a_group_writable_folder_of_a_shared_group_is_refused(tmp_path: Path) -> None:
    folder = shared(tmp_path, 0o775)
    os.chown(folder, 0, NOBODY)  # nogroup: nobody's primary group
    ran = run_main("up", "--env-file", folder / "system.env")
    assert_sound(ran, ExitCode.CONFIG)
    assert f"{folder} is writable by group" in ran.err


def test_a_folder_above_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    above = tmp_path / "theirs"
    above.mkdir()
    os.chown(above, NOBODY, NOBODY)
    mine = above / "mine"
    mine.mkdir()
    (mine / "system.env").write_text("DR_SAGEMAKER_CUDA_DEVICES=none\n")
    with pytest.raises(ConfigError, match=f"{above} belongs to nobody"):
        state_dir(mine / "system.env")
    assert not (mine / ".drgpu").exists()


def test_a_sticky_shared_folder_is_accepted_once_drgpu_made_its_own_folder(
    tmp_path: Path,
) -> None:
    folder = shared(tmp_path, 0o1777)
    made = state_dir(folder / "system.env")
    assert made.stat().st_uid == os.geteuid()
    assert made.stat().st_mode & 0o022 == 0
    write_owned_file(made / "deepracer-0.override.yml", "# Written by drgpu\n")


def test_the_invoking_user_of_sudo_is_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = shared(tmp_path, 0o755)
    os.chown(folder, NOBODY, NOBODY)
    with pytest.raises(ConfigError, match="belongs to nobody"):
        state_dir(folder / "system.env")
    monkeypatch.setenv("SUDO_UID", str(NOBODY))
    assert state_dir(folder / "system.env").is_dir()


def test_plan_and_render_to_stdout_need_no_trusted_folder(tmp_path: Path) -> None:
    folder = shared(tmp_path, 0o777)
    for command in ("plan", "render"):
        ran = run_main(command, "--env-file", folder / "system.env", "--inventory", GTX_M40)
        assert_sound(ran, ExitCode.OK)
