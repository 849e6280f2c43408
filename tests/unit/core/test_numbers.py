"""Whole numbers as users write them: ASCII digits only, bounded before conversion."""

from __future__ import annotations

import pytest

from drgpu.core.numbers import is_digits, whole_number


@pytest.mark.parametrize("text", ["0", "7", "0042", "86400"])
def test_ascii_digits_are_digits(text: str) -> None:
    assert is_digits(text)
    assert whole_number(text, 0, 86400) == int(text)


@pytest.mark.parametrize("text", ["", "²", "٣", "३", "1²", "3\n", " 3", "+3", "3_0", "1e3", "-1"])
def test_anything_else_is_no_whole_number(text: str) -> None:
    assert not is_digits(text)
    assert whole_number(text, 0, 86400) is None


def test_a_number_past_its_bound_is_none_without_converting_it() -> None:
    assert whole_number("9" * 5000, 0, 100) is None
    assert whole_number("101", 0, 100) is None
