"""The one error hierarchy: each error carries its exit code and, where one helps, a hint;
only the CLI turns one into a message (`drgpu.cli.main`)."""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from drgpu.core.findings import Finding


class ExitCode(IntEnum):
    """The documented exit codes of every drgpu command."""

    OK = 0
    UNEXPECTED = 1
    CONFIG = 2
    GPU_VALIDATION = 3
    NVML_UNAVAILABLE = 4
    DOCKER = 5
    CHECK_FAILED = 6
    HANGUP = 129  # 128 + SIGHUP: stopped by a hangup, after bringing back down what it started
    INTERRUPTED = 130  # 128 + SIGINT: Ctrl-C, likewise
    TERMINATED = 143  # 128 + SIGTERM: stopped (`kill`, `timeout`), likewise


class DrgpuError(Exception):
    """A failure with a one-line message, an exit code and an optional hint."""

    exit_code: ExitCode = ExitCode.UNEXPECTED

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class ConfigError(DrgpuError):
    """Bad command-line usage, a bad system.env, a bad compose or inventory file."""

    exit_code = ExitCode.CONFIG


class GpuValidationError(DrgpuError):
    """The requested GPUs do not fit the machine: every problem, reported at once; a
    refused plan's `findings` are what `plan --json` prints."""

    exit_code = ExitCode.GPU_VALIDATION

    def __init__(
        self, problems: Sequence[str], *, hint: str | None = None, findings: Sequence[Finding] = ()
    ) -> None:
        super().__init__("; ".join(problems), hint=hint)
        self.findings = tuple(findings)


class NvmlUnavailableError(DrgpuError):
    """NVML could not be loaded or initialised."""

    exit_code = ExitCode.NVML_UNAVAILABLE


class DockerError(DrgpuError):
    """The Docker engine or the Compose binary failed."""

    exit_code = ExitCode.DOCKER


class CheckFailedError(DrgpuError):
    """A check ran and found the result wrong (cuda-check mismatch, doctor failure)."""

    exit_code = ExitCode.CHECK_FAILED
