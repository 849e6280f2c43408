"""drgpu.host.process: every program has a time limit, at which it and its children are
stopped; what a program prints is read whatever its bytes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from drgpu.errors import ConfigError, DockerError
from drgpu.host import process


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_non_utf8_output_is_decoded_with_replacement() -> None:
    done = process.run(["sh", "-c", r"printf 'bad \377 byte\n' >&2; printf '\376'"])
    assert done.ok
    assert done.stderr == "bad \ufffd byte\n"
    assert done.stdout == "\ufffd"


def test_a_streamed_non_utf8_line_is_decoded_with_replacement() -> None:
    heard: list[str] = []

    def hear(line: str) -> str:
        heard.append(line)
        return line

    done = process.stream(["sh", "-c", r"printf 'x \377\n' >&2"], on_line=hear)
    assert done.ok
    assert heard == ["x \ufffd"]


@pytest.mark.parametrize("streamed", [False, True])
def test_a_program_past_its_limit_is_stopped_with_its_children(
    tmp_path: Path, streamed: bool
) -> None:
    pidfile = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {pidfile}; wait"
    started = time.monotonic()
    with pytest.raises(DockerError, match=r"sh -c .* did not finish in 1s"):
        if streamed:
            process.stream(["sh", "-c", script], on_line=lambda line: None, timeout=1)
        else:
            process.run(["sh", "-c", script], timeout=1)
    assert time.monotonic() - started < process.STOP_GRACE_S
    child = int(pidfile.read_text())
    for _ in range(50):
        if _gone(child):
            break
        time.sleep(0.1)
    assert _gone(child), "the script's child outlived the time limit"


def test_every_call_has_a_limit_set_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(process.TIMEOUT_KEY, "1")
    with pytest.raises(DockerError) as raised:
        process.run(["sleep", "30"])
    assert raised.value.hint is not None and process.TIMEOUT_KEY in raised.value.hint
    monkeypatch.delenv(process.TIMEOUT_KEY)
    assert process.default_timeout() == process.DEFAULT_TIMEOUT_S


@pytest.mark.parametrize("text", ["0", "²", "٣", "1.5", "inf", "9" * 5000])
def test_a_bad_limit_is_a_config_error(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv(process.TIMEOUT_KEY, text)
    with pytest.raises(ConfigError, match=process.TIMEOUT_KEY):
        process.default_timeout()


def test_a_stopped_script_takes_the_programs_it_started_along() -> None:
    # A script's own program (DRfC's start script runs docker) keeps the pipes open: the
    # stop must reach it too, or drgpu would wait for it.
    began = time.monotonic()
    with pytest.raises(DockerError, match="did not finish"):
        process.run(["bash", "-c", "sleep 30; echo done"], timeout=0.5)
    assert time.monotonic() - began < 10


def test_meanwhile_waits_for_its_work_unless_the_block_fails() -> None:
    done: list[str] = []

    def work() -> None:
        time.sleep(0.2)
        done.append("work")

    with process.meanwhile(work):
        pass
    assert done == ["work"]
    started = time.monotonic()
    with pytest.raises(DockerError), process.meanwhile(lambda: time.sleep(30)):
        raise DockerError("failed")
    assert time.monotonic() - started < 5
