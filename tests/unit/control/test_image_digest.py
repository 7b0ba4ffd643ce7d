"""The job's provenance takes the first image digest an executor reports, and a resolved one
replaces an `unresolved:` note (pure: a Job row never added to a session)."""

from __future__ import annotations

from starforge_api.job.v1 import job_spec_pb2

from control.db import models as m
from control.scheduler.dispatch import note_image_digest

DIGEST = "sha256:" + "ab" * 32


def digest_of(job: m.Job) -> str:
    prov = job_spec_pb2.Provenance()
    prov.ParseFromString(job.provenance)
    return prov.image_digest


def job(digest: str = "") -> m.Job:
    row = m.Job()
    row.provenance = job_spec_pb2.Provenance(git_commit="abc", image_digest=digest).SerializeToString()
    return row


def test_the_first_digest_is_kept_and_other_fields_stay() -> None:
    row = job()
    note_image_digest(row, "")
    assert digest_of(row) == ""
    note_image_digest(row, DIGEST)
    assert digest_of(row) == DIGEST
    note_image_digest(row, "sha256:" + "cd" * 32)
    assert digest_of(row) == DIGEST
    note_image_digest(row, "unresolved:no pods")
    assert digest_of(row) == DIGEST
    prov = job_spec_pb2.Provenance()
    prov.ParseFromString(row.provenance)
    assert prov.git_commit == "abc"


def test_a_resolved_digest_replaces_an_unresolved_one() -> None:
    row = job("unresolved:the head pod is not running yet")
    note_image_digest(row, "unresolved:another reason")
    assert digest_of(row) == "unresolved:the head pod is not running yet"
    note_image_digest(row, DIGEST)
    assert digest_of(row) == DIGEST
