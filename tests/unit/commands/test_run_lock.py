"""What `down` says it removed."""

from __future__ import annotations

from drgpu.commands.run_lock import removed_note


def test_down_says_what_it_removed() -> None:
    assert removed_note("deepracer-0", (3, 1), (0, 0)) == (
        "removed 3 containers, 1 network of deepracer-0"
    )
    assert removed_note("deepracer-0", (1, 2), (0, 0)) == (
        "removed 1 container, 2 networks of deepracer-0"
    )
    assert removed_note("deepracer-0", (2, 0), (0, 0)) == "removed 2 containers of deepracer-0"
    assert removed_note("deepracer-0", (0, 0), (0, 0)) == (
        "nothing of deepracer-0 was there to remove"
    )
