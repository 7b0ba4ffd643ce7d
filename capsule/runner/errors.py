"""The runner's exit codes and the errors that lead to them.

Exit codes other than the training command's own: 95 the runner itself failed, 96 a check before
the command failed (PRECHECK). bootstrap.sh uses 97 (integrity) and 98 (no usable Python).
"""

from __future__ import annotations

EXIT_RUNNER_ERROR = 95
EXIT_PRECHECK = 96


class PrecheckError(Exception):
    """The job cannot start as declared (missing train.sh, unknown adapter). Not retried.

    `hint`, when given, is what the console shows as the fix (else its generic PRECHECK hint)."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


class RunnerConfigError(Exception):
    """The runner's environment is incomplete; nothing can be reported."""
