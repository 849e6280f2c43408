"""The checksum line of the files `render -o` writes: any change is seen."""

from __future__ import annotations

import pytest

from drgpu.core.seal import SEAL_PREFIX, is_sealed, sealed

TEXT = "# Written by drgpu for compose project deepracer-0.\nservices: {}\n"


def test_a_sealed_text_is_the_text_and_its_checksum_line() -> None:
    written = sealed(TEXT)
    assert written.startswith(TEXT)
    assert written.removeprefix(TEXT).startswith(SEAL_PREFIX)
    assert is_sealed(written)
    assert is_sealed(sealed("no newline")) and sealed("no newline").startswith("no newline\n")


@pytest.mark.parametrize(
    "change",
    [
        lambda text: text.replace("{}", "{mine: {}}"),
        lambda text: text + "# mine\n",
        lambda text: "# mine\n" + text,
        lambda text: text[:-1],
        lambda text: text.rpartition(SEAL_PREFIX)[0],
        lambda text: text.replace(SEAL_PREFIX, SEAL_PREFIX.upper()),
        lambda text: TEXT,
        lambda text: "",
    ],
)
def test_any_change_breaks_the_seal(change: object) -> None:
    assert callable(change)
    assert not is_sealed(change(sealed(TEXT)))
