"""Where the executor's Slurm JWT comes from, and its renewal.

slurmrestd authenticates every call with a JWT (`X-SLURM-USER-TOKEN`), and JWTs expire
(`scontrol token lifespan=...`). Three sources, the first configured one wins:

- `token`: fixed (tests, or an environment variable STARFORGE_EXECUTOR_SLURM__TOKEN); no renewal;
- `token_file`: read at start and again every `token_refresh_seconds`, so an agent outside the
  executor (a cron job running `scontrol token`, a secret manager) can rotate it;
- `token_command`: run at start and every `token_refresh_seconds`; its output is the token or
  `SLURM_JWT=<token>` (what `scontrol token` prints).

The token is never logged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from common import errors
from executor_svc.slurm.config import SlurmConfig

log = logging.getLogger("starforge.executor.slurm")
COMMAND_TIMEOUT_SECONDS = 30.0


def parse_token(output: str) -> str:
    """The JWT in `output` ("SLURM_JWT=..." or the bare token, surrounding space ignored)."""
    for raw in output.splitlines():
        line = raw.strip()
        if line.startswith("SLURM_JWT="):
            return line.removeprefix("SLURM_JWT=").strip()
    return output.strip()


class TokenSource:
    """Gives the current token, renewing it from the file or command when it is due."""

    def __init__(self, cfg: SlurmConfig) -> None:
        self._cfg = cfg
        self._token = cfg.token
        self._fetched_at = time.monotonic() if cfg.token else 0.0
        self._lock = asyncio.Lock()

    @property
    def renewable(self) -> bool:
        return not self._cfg.token and bool(self._cfg.token_file or self._cfg.token_command)

    async def current(self, *, force: bool = False) -> str:
        """The token; read again from its source when stale (or `force`)."""
        if not self.renewable:
            if not self._token:
                raise errors.InvalidArgument(
                    "slurm: no JWT configured; set token, token_file or token_command "
                    "(`scontrol token username=<user> lifespan=<seconds>` makes one)"
                )
            return self._token
        async with self._lock:
            if force or not self._token or time.monotonic() - self._fetched_at >= self._cfg.token_refresh_seconds:
                self._token = await self._fetch()
                self._fetched_at = time.monotonic()
            return self._token

    async def _fetch(self) -> str:
        if self._cfg.token_file:
            path = Path(self._cfg.token_file)
            try:
                token = parse_token(await asyncio.to_thread(path.read_text))
            except OSError as exc:
                raise errors.Unavailable(f"slurm: cannot read token_file {path}: {exc.strerror}") from exc
            source = f"token_file {path}"
        else:
            token = await self._run(self._cfg.token_command)
            source = f"token_command {self._cfg.token_command[0]}"
        if not token:
            raise errors.Unavailable(f"slurm: {source} gave an empty token")
        log.info("slurm JWT read from %s", source)
        return token

    @staticmethod
    async def _run(command: list[str]) -> str:
        try:
            proc = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise errors.Unavailable(f"slurm: cannot run token_command {command[0]}: {exc.strerror}") from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(), COMMAND_TIMEOUT_SECONDS)
        except TimeoutError as exc:
            proc.kill()
            await proc.wait()
            raise errors.Unavailable(
                f"slurm: token_command {command[0]} did not finish within {COMMAND_TIMEOUT_SECONDS:g} s"
            ) from exc
        if proc.returncode != 0:
            # stderr never holds the token; stdout might, so it is not quoted.
            why = err.decode(errors="replace").strip()[-300:]
            raise errors.Unavailable(f"slurm: token_command {command[0]} exited {proc.returncode}: {why}")
        return parse_token(out.decode(errors="replace"))
