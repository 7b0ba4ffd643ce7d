"""This node's identity on the control plane: a join token once, then its own node credential.

An admin mints a join token bound to this node's name and fleet (`sf admin node join-token`) and
puts it in the config (`join_token` / `join_token_file`). The first RegisterNode spends it and the
control plane answers with a node credential (sfn_...), which is written to
`<state_dir>/node-token` (mode 0600, temp file + rename) before anything else and used for every
later call. A credential given in the config (`token` / `token_file`) wins over the stored one.
"""

from __future__ import annotations

import os
from pathlib import Path

from forgelet.config import ForgeletConfig

CREDENTIAL_FILE = "node-token"


class NodeIdentity:
    """The bearer token forgelet presents to the node registry (module docstring)."""

    def __init__(self, cfg: ForgeletConfig) -> None:
        self.cfg = cfg

    @property
    def credential_path(self) -> Path:
        return self.cfg.state_dir / CREDENTIAL_FILE

    def credential(self) -> str:
        """The node credential: from the config, else the stored one, else ""."""
        configured = self.cfg.registry_token()
        if configured:
            return configured
        try:
            return self.credential_path.read_text().strip()
        except FileNotFoundError:
            return ""

    def bearer(self) -> str:
        """What to present now: the node credential, or the join token before the first join."""
        return self.credential() or self.cfg.join()

    def store(self, credential: str) -> None:
        """Keep the credential RegisterNode returned (readable by this user only)."""
        path = self.credential_path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(credential + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
