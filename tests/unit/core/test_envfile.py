"""The settings reader against bash itself: DRfC's `dr-update-env` loop is the oracle.

Each case writes settings files, sources them through the loop the fixture checkout's
`bin/activate.sh` runs (tests/drfc: `grep -v '^#'`, `for l in $LINES`, `cut -d=`,
`eval "export ..."`) in a clean environment and an empty directory, and compares every
value drgpu reads with bash's.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drgpu.core.envfile import read_env_texts
from drgpu.errors import ConfigError
from tests.drfc import LOAD_ENV_FILE

DRFC_LOOP = LOAD_ENV_FILE + 'for f in "$@"; do _dr_load_env_file "$f"; done\nenv -0\n'
ENVIRON = {"HOME": "/home/racer", "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OUTER": "o u"}


def bash_values(tmp_path: Path, texts: list[str]) -> dict[str, str]:
    """What DRfC's loop exports for these files (bash's own reading)."""
    files = []
    for number, text in enumerate(texts):
        path = tmp_path / f"{number}.env"
        path.write_text(text, encoding="utf-8")
        files.append(str(path))
    empty = tmp_path / "cwd"
    empty.mkdir(exist_ok=True)
    done = subprocess.run(
        ["bash", "-c", DRFC_LOOP, "drfc", *files],
        env=ENVIRON,
        cwd=empty,
        capture_output=True,
        check=False,
    )
    exported = done.stdout.split(b"\0")
    values = {}
    for item in exported:
        key, _, value = item.decode("utf-8", "surrogateescape").partition("=")
        if key:
            values[key] = value
    return values


def drgpu_values(tmp_path: Path, texts: list[str]) -> dict[str, str]:
    read = read_env_texts(
        [(tmp_path / f"{number}.env", text) for number, text in enumerate(texts)], ENVIRON
    )
    return dict(read.values)


def assert_same(tmp_path: Path, *texts: str) -> dict[str, str]:
    """drgpu reads these files (no error) and every value equals bash's."""
    ours = drgpu_values(tmp_path, list(texts))
    theirs = bash_values(tmp_path, list(texts))
    assert ours == {key: theirs.get(key) for key in ours}
    return ours


CERTAIN = [
    "DR_A=plain",
    "DR_A=",
    'DR_A=""',
    "DR_A='$OUTER'",
    "DR_A=$OUTER",
    "DR_A=${OUTER}x",
    "DR_A=${MISSING:-default}",
    "DR_A=${MISSING-default}",
    "DR_A=${OUTER:+alt}",
    "DR_A=${MISSING:-${OUTER}}",
    'DR_A="${MISSING:-$OUTER}"',
    "DR_A=~/deepracer",
    "DR_A=a:~/b",
    "DR_A=\\$literal",
    'DR_A="a\\$b\\c"',
    "DR_A=a\\",
    "DR_A=$",
    "DR_A=a#b",
    "DR_A=a}",
    "export DR_A=1",
    "   DR_A=1",
    "DR_A=1\t",
    "DR_A=$DR_A$DR_A",
    "DR_A=$MISSING",
    "HOME=/elsewhere\nDR_A=~/x",
]


@pytest.mark.parametrize("line", CERTAIN)
def test_a_line_reads_as_bash_reads_it(tmp_path: Path, line: str) -> None:
    assert "DR_A" in assert_same(tmp_path, "DR_A=before\n" + line + "\n")


def test_run_env_refers_to_system_env_and_the_environment(tmp_path: Path) -> None:
    system = "DR_LOCAL_S3_CUSTOM_FILES_PREFIX=custom_files\nDR_CAR_NAME=FastCar\n"
    run = (
        "DR_LOCAL_S3_MODEL_METADATA_KEY=$DR_LOCAL_S3_CUSTOM_FILES_PREFIX/model_metadata.json\n"
        "DR_DISPLAY_NAME=$DR_CAR_NAME\n#DR_EVAL_RTF=1.0\nDR_HOME=${HOME}/x\n"
    )
    values = assert_same(tmp_path, system, run)
    assert values["DR_LOCAL_S3_MODEL_METADATA_KEY"] == "custom_files/model_metadata.json"
    assert values["DR_DISPLAY_NAME"] == "FastCar"


# Lines bash reads otherwise than they look: drgpu refuses each, naming file:line.
REFUSED = [
    'DR_SAGEMAKER_CUDA_DEVICES="1',  # issue 12's reproducer: bash stops at the open quote
    'DR_A="a b"',
    "DR_A=a b",
    "DR_A=a=b",
    "DR_A={a,b}",
    "DR_A=$(id)",
    "DR_A=`id`",
    "DR_A=a;b",
    "DR_A=*",
    "DR_A=1\r",
    "DR_A",
    "1A=1",
    "DR_A=$1",
    "DR_A=${OUTER:0:1}",
    "DR_A=1 # DR_WORKERS=3",
    "  # DR_WORKERS=3",
    "DR_A=~root",
]


@pytest.mark.parametrize("line", REFUSED)
def test_a_line_bash_reads_otherwise_is_refused_with_its_place(tmp_path: Path, line: str) -> None:
    with pytest.raises(ConfigError, match=r"0\.env:2: "):
        drgpu_values(tmp_path, ["DR_B=1\n" + line + "\n"])


FRAGMENTS = st.sampled_from(
    [
        "a",
        "Z9",
        "/",
        ":",
        ".",
        ",",
        "-",
        "_",
        "%",
        "@",
        "+",
        "#",
        "~",
        "}",
        "$",
        " ",
        "\t",
        "=",
        "'",
        '"',
        "\\",
        "\\$",
        "{",
        "*",
        "?",
        ";",
        "(",
        "`",
        "$DR_A",
        "$OUTER",
        "$MISSING",
        "${DR_A}",
        "${OUTER}",
        "${MISSING:-d}",
        "${MISSING-d}",
        "${OUTER:+s}",
        "${OUTER+s}",
        "${MISSING:-$OUTER}",
        "$(",
        "${",
        "'q z'",
        '"q $OUTER"',
        "'$OUTER'",
        '"\\"',
        "~/",
        ":~",
    ]
)
LINES = st.builds(
    lambda prefix, key, value: f"{prefix}{key}={value}",
    st.sampled_from(["", "", "", " ", "export ", "#", " # "]),
    st.sampled_from(["DR_A", "DR_B", "OUTER", "DR_A "]),
    st.lists(FRAGMENTS, max_size=6).map("".join),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.lists(LINES, min_size=1, max_size=3), min_size=1, max_size=2))
def test_generated_lines_read_as_bash_reads_them_or_are_refused(
    tmp_path: Path, files: list[list[str]]
) -> None:
    """system.env (and run.env on top): drgpu refuses, or reads every value as bash."""
    texts = ["\n".join(lines) + "\n" for lines in files]
    try:
        ours = drgpu_values(tmp_path, texts)
    except ConfigError:
        return
    theirs = bash_values(tmp_path, texts)
    assert ours == {key: theirs.get(key) for key in ours}
    drfc_keys = {key: value for key, value in theirs.items() if key.startswith("DR_")}
    assert drfc_keys == {key: value for key, value in ours.items() if key.startswith("DR_")}
