"""drgpu's talk on stderr: one line each, whatever text of others it quotes."""

from __future__ import annotations

import pytest

from drgpu.ui.talk import note, one_line, warn


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain", "plain"),
        ("a\nb\r\nc", "a b c"),
        ("\x1b[2J\x1b]0;pwned\x07", "\\x1b[2J\\x1b]0;pwned\\x07"),
        ("nul\x00 here", "nul\\x00 here"),
        ("bidi \u202e txt", "bidi \\u202e txt"),
        ("caf\u00e9", "caf\u00e9"),
    ],
)
def test_one_line_shows_control_characters_visibly(text: str, shown: str) -> None:
    assert one_line(text) == shown


def test_a_planted_label_cannot_fake_a_line_or_drive_the_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    planted = "drgpu up x (pid 1 of \x1b[31mroot\nn\ndrgpu: error: run rm -rf ~ now)"
    note(f"waiting for {planted} to finish")
    warn(planted)
    err = capsys.readouterr().err
    assert err.count("\n") == 2
    assert "\x1b" not in err
    assert not any(line.startswith("drgpu: error:") for line in err.splitlines())
