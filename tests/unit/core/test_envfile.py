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
    texts_read = [(tmp_path / f"{number}.env", text) for number, text in enumerate(texts)]
    return read_env_texts(texts_read, ENVIRON)[0]


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


# --- issue 23: carriage returns, secrets in errors, bash's own variables -------------------


@pytest.mark.parametrize(
    "text",
    [
        "DR_RUN_ID=a\rDR_WORKERS=3\n",  # a lone CR: bash reads one line, one value
        "DR_A=1\r\nDR_B=2\r\n",
        "\rDR_A=1\n",
        "# a comment\r\nDR_A=1\n",  # CR in a comment line too
        "DR_A=1\nDR_B='x\ry'\n",
    ],
)
def test_a_carriage_return_anywhere_is_refused_with_its_place(text: str) -> None:
    with pytest.raises(ConfigError, match=r"0\.env:\d+: a carriage return") as refused:
        read_env_texts([(Path("0.env"), text)], ENVIRON)
    assert refused.value.hint is not None and "dos2unix" in refused.value.hint


@pytest.mark.parametrize("separator", ["\x0b", "\x0c", "\x1c", "\x85", "\u2028"])
def test_lines_split_at_newlines_alone_as_bash_reads_them(tmp_path: Path, separator: str) -> None:
    text = f"DR_A=a{separator}b\nDR_B=2\n"
    assert drgpu_values(tmp_path, [text]) == {"DR_A": f"a{separator}b", "DR_B": "2"}
    assert bash_values(tmp_path, [text])["DR_A"] == f"a{separator}b"


SECRET_VALUE = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq9Q8w0v"


@pytest.mark.parametrize(
    "line",
    [
        f"AWS_SECRET_ACCESS_KEY={SECRET_VALUE[:20]} {SECRET_VALUE[20:]}",  # a space
        "MY_API_TOKEN=abcdEFGH12345678==",  # base64 ends in =
        f"export DR_LOCAL_S3_PASSWORD={SECRET_VALUE}=",
        f"AWS_SECRET_ACCESS_KEY {SECRET_VALUE}",  # no =
        f"AWS_SECRET_ACCESS_KEY={SECRET_VALUE} # {SECRET_VALUE}=x",
        f"AWS_SECRET_ACCESS_KEY=$1{SECRET_VALUE}",
        f"AWS_SECRET_ACCESS_KEY=${{{SECRET_VALUE[:8]}%x}}",
        f"AWS_SECRET_ACCESS_KEY=$'{SECRET_VALUE}'",
        f"AWS_SECRET_ACCESS_KEY='{SECRET_VALUE}",
    ],
)
def test_an_error_about_a_secrets_line_names_it_and_never_shows_its_value(line: str) -> None:
    with pytest.raises(ConfigError) as refused:
        read_env_texts([(Path("system.env"), line + "\n")], ENVIRON)
    said = refused.value.message + (refused.value.hint or "")
    assert "system.env:1: " in said
    value = line.partition("=")[2] or line.partition(" ")[2]
    for start in range(len(value) - 3):
        chunk = value[start : start + 4]
        assert chunk not in said or not any(c.isalnum() for c in chunk), (chunk, said)
    assert any(name in said for name in ("SECRET", "TOKEN", "PASSWORD")), said


@pytest.mark.parametrize("secret_first", [True, False])
def test_an_error_quoting_a_line_never_shows_a_secret_another_line_holds(
    secret_first: bool,
) -> None:
    lines = ["DB_PASSWD='hunter22xx'", "DR_X=a hunter22xx"]
    text = "\n".join(lines if secret_first else lines[::-1]) + "\n"
    with pytest.raises(ConfigError) as refused:
        read_env_texts([(Path("run.env"), text)], ENVIRON)
    assert "'DR_X=a ****' has a space" in refused.value.message
    assert "hunter22" not in refused.value.message


def test_an_error_about_another_line_still_quotes_it() -> None:
    with pytest.raises(ConfigError, match="keeps only 'abc'"):
        read_env_texts([(Path("0.env"), "DR_A=abc=d\n")], ENVIRON)


def test_bash_s_uid_and_euid_read_as_bash_reads_them(tmp_path: Path) -> None:
    shell = {**ENVIRON, "UID": str(os.getuid()), "EUID": str(os.geteuid())}
    text = "DR_A=$UID\nDR_B=${EUID}-x\n"
    values = read_env_texts([(tmp_path / "0.env", text)], shell)[0]
    theirs = bash_values(tmp_path, [text])
    assert values == {"DR_A": theirs["DR_A"], "DR_B": theirs["DR_B"]}
    assert values["DR_A"] == str(os.getuid())


@pytest.mark.parametrize("name", ["RANDOM", "SRANDOM", "SECONDS", "LINENO", "BASHPID", "PPID"])
def test_a_variable_only_bash_knows_is_refused(name: str) -> None:
    for line in (f"DR_A=${name}", f"DR_A=${{{name}:-1}}", f'DR_A="x${name}"'):
        with pytest.raises(ConfigError, match=f"0.env:1: DR_A: \\${name} is set by"):
            read_env_texts([(Path("0.env"), line + "\n")], {name: "7"})


def test_a_secret_set_to_a_variable_only_bash_knows_is_refused_by_its_name() -> None:
    with pytest.raises(ConfigError, match=r"DR_LOCAL_S3_PASSWORD: \$RANDOM is set by"):
        read_env_texts([(Path("0.env"), "DR_LOCAL_S3_PASSWORD=$RANDOM\n")], ENVIRON)


@pytest.mark.parametrize("name", ["UID", "EUID"])
def test_setting_a_read_only_variable_of_bash_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=f"{name} is read-only in bash"):
        read_env_texts([(Path("0.env"), f"{name}=5\n")], ENVIRON)
