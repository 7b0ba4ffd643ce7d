"""Where each attempt was placed: the agent executor's one piece of state, kept in a JSON file.

Observe, Stop and Cleanup must reach the node an attempt runs on, also after the agent executor
restarted, so every placement is written (atomically: temp file + rename) before its StartAttempt
is sent. If the file is lost, ListAttempts (InspectAttempts on every node) rebuilds the map.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("starforge.executor.agent")


@dataclass
class Placement:
    """An attempt placed on a node, with the GPUs the agent chose there."""

    attempt_id: str
    node: str
    series: str = ""
    gpus: list[int] = field(default_factory=list)
    # When the placement was made, then when StartAttempt returned: the GPUs count as taken until
    # the node's heartbeat is newer than this by the reservation grace.
    placed_at: float = dataclasses.field(default_factory=time.time)
    # The node was seen LOST while the attempt was placed there: the control plane failed the
    # attempt (node lost) and ran it again elsewhere, so if the node comes back, this copy is a
    # stray that Cleanup stops.
    lost: bool = False
    # When Cleanup first found the attempt still running although the ledger ended it.
    cleanup_since: float | None = None


class PlacementBook:
    """The placements, persisted in `<state_dir>/placements.json`."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "placements.json"
        self._items: dict[str, Placement] = {}

    def load(self) -> None:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable %s (%s); ListAttempts rebuilds it", self.path, exc)
            return
        names = {f.name for f in dataclasses.fields(Placement)}
        for item in doc.get("placements", []):
            p = Placement(**{k: v for k, v in item.items() if k in names})
            self._items[p.attempt_id] = p

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        doc = {"placements": [dataclasses.asdict(p) for p in self._items.values()]}
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
        os.replace(tmp, self.path)

    def get(self, attempt_id: str) -> Placement | None:
        return self._items.get(attempt_id)

    def put(self, placement: Placement) -> None:
        self._items[placement.attempt_id] = placement
        self._save()

    def drop(self, attempt_id: str) -> None:
        if self._items.pop(attempt_id, None) is not None:
            self._save()

    def all(self) -> list[Placement]:
        return list(self._items.values())

    def mark_lost(self, nodes: set[str]) -> None:
        """Flag placements on nodes the registry reports LOST (see `Placement.lost`)."""
        changed = False
        for p in self._items.values():
            if p.node in nodes and not p.lost:
                p.lost = changed = True
        if changed:
            self._save()
