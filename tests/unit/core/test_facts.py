"""drgpu/core/facts.py: what a process's command line shows (its secrets hidden)."""

from __future__ import annotations

from drgpu.core.facts import ProcessFacts


def test_a_command_line_is_one_line_with_secret_values_hidden() -> None:
    argv = ("python3", "train.py", "--api-key", "s3cr3t", "--epochs=3", "AWS_SECRET=x", "a\nb")
    command = ProcessFacts(argv, "alice").command
    assert command == "python3 train.py --api-key *** --epochs=3 AWS_SECRET=*** a b"
    assert "s3cr3t" not in ProcessFacts(("run", "--password=s3cr3t"), "bob").command


def test_a_urls_password_in_a_command_line_is_hidden() -> None:
    argv = ("sync", "--s3=http://bob:urlPW@host", "ftp://a:b2c3@h/x")
    command = ProcessFacts(argv, "bob").command
    assert command == "sync --s3=http://bob:***@host ftp://a:***@h/x"
