"""The sender writes a ReportRequest around the journal's record bytes instead of parsing and
encoding each record again: what it sends must decode, with both code generators, to the request
the records make."""

from __future__ import annotations

import datetime

from sfpb.starforge.ingest import v1 as ingest
from sfpb.starforge.job import v1 as job
from starforge_api.ingest.v1 import ingest_service_pb2 as pb

from capsule.runner.ingest import EncodedReport, encode_report


def _records() -> list[ingest.Record]:
    at = datetime.datetime(2026, 12, 7, 3, 0, 0, 123456, tzinfo=datetime.UTC)
    return [
        ingest.Record(
            seq=1,
            time=at,
            lifecycle=job.LifecycleEvent(
                phase=job.LifecyclePhase.COMMAND_EXITED, time=at, exit_code=0, details={"k": "v"}
            ),
        ),
        # a record over 127 bytes: a two-byte length
        ingest.Record(seq=2, time=at, log_chunk=ingest.LogChunk(stream=job.LogStream.STDOUT, lines=["x" * 300, "é"])),
        ingest.Record(seq=300, time=at),
    ]


def test_an_encoded_report_is_the_request_its_records_make() -> None:
    records = _records()
    attempt_id = "j" + "0" * 140 + ".1"  # an id over 127 bytes: a two-byte length
    data = encode_report(attempt_id, [bytes(r) for r in records])
    assert ingest.ReportRequest.parse(data) == ingest.ReportRequest(attempt_id=attempt_id, records=records)
    grpcio = pb.ReportRequest.FromString(data)
    assert grpcio.attempt_id == attempt_id
    assert [r.seq for r in grpcio.records] == [1, 2, 300]
    assert grpcio.records[1].log_chunk.lines == ["x" * 300, "é"]
    assert grpcio.records[0].lifecycle.details == {"k": "v"}
    assert EncodedReport(data).SerializeToString() is data


def test_a_report_without_records_is_its_attempt_alone() -> None:
    assert pb.ReportRequest.FromString(encode_report("j1.1", [])) == pb.ReportRequest(attempt_id="j1.1")
