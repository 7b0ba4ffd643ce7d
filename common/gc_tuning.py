"""The garbage collector's settings for StarForge's servers and for `sf`.

CPython's defaults (thresholds 700, 10, 10) suit short programs. A console that holds thousands
of open streams keeps millions of live objects (each call's state, its coroutines, buffers), and
with the defaults:
- a young collection runs after every 700 net container allocations, so about every message;
- a full collection walks every live object, and it runs whenever the objects that survived
  grew by a quarter since the last one, which streams that keep connecting cause all the time.

Each collection holds the GIL, so the event loop stands still while it runs. Measured with
`python -m bench followers` (10,000 follow streams, one console): 56 full collections in 145 s,
each up to 0.7 s, and 48 of the 145 s spent in the collector. The streams waiting to connect were
cancelled by gRPC while the loop stood still, and some never connected.

`tune_for_serving()`, called once a server is up (`common.server.serve_until_signal`):
- `gc.freeze()` moves everything start-up built (modules, the catalog, SQLAlchemy's mappers,
  the generated protobuf classes) to a permanent generation that no collection walks again;
- the thresholds become SERVING_THRESHOLDS: a young collection after 50,000 net allocations
  (a pause of tens of milliseconds with 10,000 streams open, not one every few messages), a
  middle one after 2.5 million and a full one after 250 million (and CPython's own rule still
  holds: a full collection also waits until the survivors grew by a quarter).

`tune_for_command()` is the same thresholds for `sf` (first thing in `cli.main.main`), without
the collection and the freeze: a command starts small, and its imports alone (grpc, protobuf, the
generated messages) made CPython's defaults run about 50 collections, some 8 ms of a command that
takes 80-120 ms. A long `sf job logs -f` allocates per line what reference counting frees.

Reference cycles are still collected, only later: a young collection still frees the cycles it
finds, and garbage that got old waits for the next collection of its generation. What StarForge
allocates per message dies by reference counting, and the servers' memory is bounded by the
limits that bound their streams, not by the collector (the followers row reports the console's
RSS).
"""

from __future__ import annotations

import gc

# (young, middle, old): see the module docstring for why these and what they were measured against.
SERVING_THRESHOLDS = (50_000, 50, 100)


def tune_for_command() -> None:
    """SERVING_THRESHOLDS for a command-line process; call first, before its imports."""
    gc.set_threshold(*SERVING_THRESHOLDS)


def tune_for_serving() -> None:
    """Freeze what exists now and set SERVING_THRESHOLDS; call once, when the process serves."""
    gc.collect()  # what start-up left as garbage is freed, not frozen
    gc.freeze()
    gc.set_threshold(*SERVING_THRESHOLDS)
