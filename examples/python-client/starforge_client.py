"""A StarForge API client in plain Python: what a platform team's own tooling does without `sf`.

It needs only the Python client package, `starforge_api`: the code generated from proto/, as a wheel
(`make dist` writes dist/starforge_api-<version>-py3-none-any.whl; it requires grpcio, grpcio-status
for google.rpc error details, protobuf and googleapis-common-protos). In a checkout, gen/python on
PYTHONPATH does the same. Nothing here imports StarForge's own packages.

    export STARFORGE_ADDRESS=127.0.0.1:50051 STARFORGE_TOKEN=...   # from `sf token create`
    python starforge_client.py list
    python starforge_client.py copy JOB_ID        # submit a copy of a job, print the new id
    python starforge_client.py logs JOB_ID        # follow its logs until it ends
    python starforge_client.py watch JOB_ID       # print each state change until it ends
    python starforge_client.py get JOB_ID

Refusals are printed from their google.rpc details (ErrorInfo reason, BadRequest field
violations, PreconditionFailure, ResourceInfo, RetryInfo, DebugInfo incident id) and exit 1.
TLS: set STARFORGE_CA_FILE to the console's CA certificate (PEM).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.control.v1 import control_service_pb2_grpc as ctl_grpc
from starforge_api.job.v1 import job_state_pb2

TERMINAL = {job_state_pb2.JOB_STATE_SUCCEEDED, job_state_pb2.JOB_STATE_FAILED, job_state_pb2.JOB_STATE_STOPPED}
DETAIL_TYPES = (
    error_details_pb2.ErrorInfo,
    error_details_pb2.BadRequest,
    error_details_pb2.PreconditionFailure,
    error_details_pb2.ResourceInfo,
    error_details_pb2.RetryInfo,
    error_details_pb2.DebugInfo,
    error_details_pb2.QuotaFailure,
    error_details_pb2.Help,
)


class Client:
    """One channel to the control plane and the caller's bearer token."""

    def __init__(self, address: str, token: str, ca_file: str = "") -> None:
        if ca_file:
            with open(ca_file, "rb") as f:
                channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(f.read()))
        else:
            channel = grpc.insecure_channel(address)
        self.channel = channel
        self.stub = ctl_grpc.ControlServiceStub(channel)
        # The scheme is case-insensitive ("bearer" works too).
        self.md = (("authorization", f"Bearer {token}"),)

    def list(self, page_size: int = 50) -> Iterator[Any]:
        """Every job the caller may see, newest first, page by page."""
        token = ""
        while True:
            page = self.stub.ListJobs(ctl.ListJobsRequest(page_size=page_size, page_token=token), metadata=self.md)
            yield from page.jobs
            token = page.next_page_token
            if not token:
                return

    def get(self, job_id: str) -> Any:
        return self.stub.GetJob(ctl.GetJobRequest(job_id=job_id), metadata=self.md).job

    def copy(self, job_id: str) -> Any:
        """Submits the job's admitted spec again (same workspace, same settings) as a new job.

        The request id makes the call idempotent: a retry after a lost answer returns the same job.
        """
        spec = self.get(job_id).spec
        request = ctl.SubmitJobRequest(spec=spec, request_id=str(uuid.uuid4()))
        return self.stub.SubmitJob(request, metadata=self.md).job

    def logs(self, job_id: str) -> Iterator[str]:
        """Every log line of the job from the start, following until it ends."""
        request = ctl.StreamJobLogsRequest(job_id=job_id, follow=True)
        for response in self.stub.StreamJobLogs(request, metadata=self.md):
            for line in response.lines:
                yield line.text

    def watch(self, job_id: str) -> Iterator[tuple[str, Any]]:
        """(state name, the job after that event) from the first event until a terminal state.

        A client that loses the stream resumes with after_sequence = the last event's sequence.
        """
        request = ctl.WatchJobRequest(job_id=job_id)
        for response in self.stub.WatchJob(request, metadata=self.md):
            name = job_state_pb2.JobState.Name(response.job.state)
            yield name, response.job
            if response.job.state in TERMINAL:
                return


def describe_error(error: grpc.RpcError) -> dict[str, Any]:
    """The status code, message and every decoded google.rpc detail of a refused call."""
    out: dict[str, Any] = {"code": error.code().name, "message": error.details(), "details": []}
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    for any_detail in status.details if status is not None else ():
        for detail_type in DETAIL_TYPES:
            if any_detail.Is(detail_type.DESCRIPTOR):
                detail = detail_type()
                any_detail.Unpack(detail)
                out["details"].append({"type": detail_type.DESCRIPTOR.full_name, **json_format.MessageToDict(detail)})
                break
        else:
            out["details"].append({"type": any_detail.TypeName()})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["list", "get", "copy", "logs", "watch"])
    parser.add_argument("job_id", nargs="?", default="")
    args = parser.parse_args(argv)
    address, token = os.environ.get("STARFORGE_ADDRESS", ""), os.environ.get("STARFORGE_TOKEN", "")
    if not address or not token:
        print("set STARFORGE_ADDRESS and STARFORGE_TOKEN", file=sys.stderr)
        return 2
    if args.command != "list" and not args.job_id:
        print(f"{args.command} needs a JOB_ID", file=sys.stderr)
        return 2
    client = Client(address, token, os.environ.get("STARFORGE_CA_FILE", ""))
    try:
        if args.command == "list":
            for job in client.list():
                print(f"{job.job_id}\t{job_state_pb2.JobState.Name(job.state)}\t{job.method}")
        elif args.command == "get":
            print(json_format.MessageToJson(client.get(args.job_id)))
        elif args.command == "copy":
            print(client.copy(args.job_id).job_id)
        elif args.command == "logs":
            for text in client.logs(args.job_id):
                print(text)
        else:
            for state, _job in client.watch(args.job_id):
                print(state)
    except grpc.RpcError as error:
        print(json.dumps(describe_error(error), indent=2), file=sys.stderr)
        return 1
    finally:
        client.channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
