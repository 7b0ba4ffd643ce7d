"""What every executor kind shares below the `Executor` contract (docs/executors.md, "Shared plumbing").

- `records`: the attempt tree (one directory per attempt, FORGE_OUT_DIR per job) and the JSON
  record that makes Launch idempotent across restarts.
- `locks`: per-attempt locks and the set of launches in progress (observed as PENDING).
- `materialize`: an attempt's directories made afresh and its files fetched into them.
- `pools`: a request's pools checked against what a kind can ever run.
- `paths`: the one rule for relative paths in manifests.
- `failures`: exit codes and log evidence that class a failed attempt.
- `states`: backend state -> ledger state, as a table per kind in one style.

Standard library, protobuf messages, `common` and `executor_svc.bundle` only, so no kind pulls in another's SDK.
"""
