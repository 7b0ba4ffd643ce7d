"""The capsule's own guess at why a command failed, from what it printed on stderr.

Only unambiguous signatures are recognised; anything else non-zero is USER_CODE. The control
plane decides retries from this class, so a wrong OUT_OF_MEMORY would be worse than none.
"""

from __future__ import annotations

from sfpb.starforge.job import v1 as job

OOM_SIGNATURES = ("CUDA out of memory", "torch.OutOfMemoryError", "torch.cuda.OutOfMemoryError")


class FailureHints:
    def __init__(self) -> None:
        self.out_of_memory = False

    def observe(self, lines: list[str]) -> None:
        if self.out_of_memory:
            return
        for line in lines:
            if any(signature in line for signature in OOM_SIGNATURES):
                self.out_of_memory = True
                return

    def classify(self, exit_code: int, *, stopped: bool) -> job.FailureClass:
        if exit_code == 0 or stopped:
            return job.FailureClass.UNSPECIFIED
        if self.out_of_memory:
            return job.FailureClass.OUT_OF_MEMORY
        return job.FailureClass.USER_CODE
