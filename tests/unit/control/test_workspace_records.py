"""The console's memory of admitted workspaces (control/workspace_records.py)."""

from __future__ import annotations

from starforge_api.job.v1 import workspace_pb2

from control.workspace_records import ParsedManifest, WorkspaceRecords

D1, D2, D3 = "1" * 64, "2" * 64, "3" * 64


def test_a_record_speaks_for_its_key_and_digest_only() -> None:
    records = WorkspaceRecords()
    records.record_admitted("alice\0user", D1)
    assert records.admitted("alice\0user", D1)
    assert not records.admitted("bob\0user", D1)
    assert not records.admitted("alice\0admin", D1)
    assert not records.admitted("alice\0user", D2)


def test_the_oldest_records_are_forgotten_first() -> None:
    records = WorkspaceRecords(manifests=2, admitted=2)
    for d in (D1, D2):
        records.record_admitted("u", d)
    records.admitted("u", D1)  # a lookup does not keep a record longer
    records.record_admitted("u", D3)
    assert [records.admitted("u", d) for d in (D1, D2, D3)] == [False, True, True]

    m = workspace_pb2.WorkspaceManifest(files=[workspace_pb2.WorkspaceFile(path="a", sha256=D3, size=1)])
    parsed = ParsedManifest(m.SerializeToString(), {D3: 1})
    records.keep_manifest(D1, parsed)
    records.keep_manifest(D2, parsed)
    assert records.manifest(D1) is parsed  # used: now the newest
    records.keep_manifest(D3, parsed)
    assert records.manifest(D2) is None and records.manifest(D1) is parsed
    assert records.manifest(D3) is not None and records.manifest(D3).workspace() == m  # type: ignore[union-attr]
