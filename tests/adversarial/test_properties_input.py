"""Generated input of issue 23's kinds through `drgpu plan` (in-process): a secret's line,
however malformed, is never echoed; a carriage return anywhere is refused with its
line. Budget: PROPERTY in helpers."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drgpu.errors import ExitCode
from tests.adversarial.helpers import GTX_M40, PROPERTY, assert_sound
from tests.support.runners import run_main


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="drgpu-props-input-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("DRGPU_DEBUG", raising=False)


# Secret-looking words, and what makes a line malformed: spaces, `=`, quotes, expansions.
SECRET_WORDS = st.text(alphabet="QXZqxz0123456789/+", min_size=5, max_size=12)
MARKS = st.sampled_from([" ", "=", "==", "'", '"', "$", "${", "}", "$1", ";", "*", "#", " # "])
VALUES = st.lists(st.one_of(SECRET_WORDS, MARKS), min_size=1, max_size=6).map("".join)
NAMES = st.sampled_from(
    ["AWS_SECRET_ACCESS_KEY", "MY_API_TOKEN", "DR_LOCAL_S3_PASSWORD", "export GITHUB_TOKEN"]
)


@PROPERTY
@given(name=NAMES, value=VALUES)
def test_a_secret_line_is_never_echoed(folder: Path, name: str, value: str) -> None:
    env = folder / "system.env"
    env.write_text(f"DR_SAGEMAKER_CUDA_DEVICES=0\n{name}={value}\n")
    ran = run_main("plan", "--env-file", env, "--inventory", GTX_M40)
    assert_sound(ran, ExitCode.OK, ExitCode.CONFIG)
    words = [w for w in value.replace("=", " ").replace("'", " ").split() if len(w) >= 5]
    for word in words:
        for start in range(len(word) - 4):
            assert word[start : start + 5] not in ran.err, (word, ran.err)


LINES = st.sampled_from(
    ["DR_RUN_ID=7", "DR_WORKERS=2", "# a comment", "", "DR_SAGEMAKER_CUDA_DEVICES=0"]
)


@PROPERTY
@given(lines=st.lists(LINES, min_size=1, max_size=5), data=st.data())
def test_a_carriage_return_anywhere_is_refused_with_its_line(
    folder: Path, lines: list[str], data: st.DataObject
) -> None:
    text = "\n".join(lines) + "\n"
    at = data.draw(st.integers(min_value=0, max_value=len(text)))
    written = text[:at] + "\r" + text[at:]
    env = folder / "system.env"
    env.write_bytes(written.encode())
    ran = run_main("plan", "--env-file", env, "--inventory", GTX_M40)
    assert_sound(ran, ExitCode.CONFIG)
    line = written[:at].count("\n") + 1
    assert f"{env}:{line}: a carriage return" in ran.err
