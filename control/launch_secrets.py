"""The credentials of a LaunchRequest: never stored in the ledger, added each time a launch is sent.

The ledger keeps every attempt's LaunchRequest (`attempts.launch`) so that a launch can be re-sent
after a crash or an expired lease; a copy of that column (a backup, a replica's disk, an admin's
query) must not hand out credentials. So it is stored in `stored_form` (no run token, no secret
environment), and every send goes through `resolve_launch`, which mints a fresh run token for the
attempt and resolves the secret environment. The token of an earlier send stays valid for the same
attempt until it ends: that first launch may have reached the executor.
"""

from __future__ import annotations

from sqlalchemy.orm import Session
from starforge_api.executor.v1 import launch_request_pb2 as lr
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors
from control import auth, secrets
from control.db import models as m
from control.ledger import jobs, outcomes


def stored_form(request: lr.LaunchRequest) -> bytes:
    """`request` as the ledger keeps it: without the run token and without secret env values."""
    stored = lr.LaunchRequest()
    stored.CopyFrom(request)
    stored.ingest.token = ""
    stored.blob_source.token = ""
    stored.secret_env.clear()
    return stored.SerializeToString()


def resolve_launch(
    s: Session,
    attempt: m.Attempt,
    keyring: secrets.Keyring | None = None,
    *,
    built: tuple[lr.LaunchRequest, m.Job] | None = None,
) -> lr.LaunchRequest:
    """The LaunchRequest to send for `attempt`: its stored form plus a new run token and the values of
    the secrets its job names (`control.secrets`; FailedPrecondition when one is gone).

    `built`: the request the caller has just stored for the attempt (it gets the credentials in
    place) and the attempt's job, so that a claim does not parse back what it built nor read the
    job again.

    The deployment's own credentials (its HuggingFace token) are never part of it: they serve the
    control plane (the admission precheck), not the code inside jobs."""
    if built is not None:
        request, job = built
    else:
        request = lr.LaunchRequest()
        request.ParseFromString(attempt.launch)
        job = jobs.get_job(s, attempt.job_id)
    values = secrets.resolve_secret_env(s, job, keyring or secrets.Keyring(None))
    secrets.name_secret_env(request, values)
    request.secret_env.clear()
    request.secret_env.update(values)
    token = auth.issue_run_token(s, job.owner, job.id, attempt.id)
    request.ingest.token = token
    request.blob_source.token = token
    return request


def send_form_or_fail(
    s: Session,
    attempt: m.Attempt,
    keyring: secrets.Keyring,
    *,
    built: tuple[lr.LaunchRequest, m.Job] | None = None,
) -> bytes | None:
    """`resolve_launch` serialized, or None after failing the attempt as a precheck when it cannot be
    resolved (a secret the job names was deleted, or the console lost its secrets key)."""
    try:
        return resolve_launch(s, attempt, keyring, built=built).SerializeToString()
    except errors.StarforgeError as e:
        job = jobs.get_job(s, attempt.job_id, for_update=True)
        outcomes.finish_attempt(
            s, job, attempt, exit_code=None, known_class=st.FAILURE_CLASS_PRECHECK, message=e.message
        )
        return None
