"""The bodies of the hot read commands: `sf job ls`, `sf job status` and `sf job logs`.

Both ways into them call these functions: the typer commands of `cli.commands.job` and the fast
path of `cli.fastpath`, so output, exit codes and errors are the same whichever way a command came
in. Each returns the exit code of the command (0, or what a followed job's end means). This module
imports neither typer nor rich (rich is loaded only when a terminal gets a table or panel).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from starforge_api.control.v1 import control_service_pb2
from starforge_api.job.v1 import job_pb2, job_state_pb2

from cli import tables
from cli.errors import EXIT_OK, usage
from cli.follow import exit_code_for, follow_logs, resolve_job_id, state_name
from cli.output import Format, message_to_dict

if TYPE_CHECKING:
    from cli.client import Client
    from cli.context import AppState
    from cli.fastclient import ReadClient


def parse_states(values: list[str]) -> list[job_state_pb2.JobState]:
    """`--state running` (any case, repeatable) → JobState values."""
    valid = [
        n.removeprefix("JOB_STATE_").lower()
        for n in job_state_pb2.JobState.keys()  # noqa: SIM118 - EnumTypeWrapper has no __iter__ of names
        if not n.endswith("UNSPECIFIED")
    ]
    states = []
    for v in values:
        for item in v.split(","):
            name = item.strip().lower()
            if name not in valid:
                raise usage(f"--state {item!r}: unknown state; use one of {', '.join(valid)}")
            states.append(cast(job_state_pb2.JobState, job_state_pb2.JobState.Value("JOB_STATE_" + name.upper())))
    return states


def parse_pairs(values: list[str], flag: str) -> dict[str, str]:
    """A repeatable `flag KEY=VALUE` option as a dict (the last value of a key wins); a value
    without `=` or without a key is a usage error naming `flag`."""
    out: dict[str, str] = {}
    for v in values:
        key, sep, value = v.partition("=")
        if not sep or not key:
            raise usage(f"{flag} {v!r}: expected KEY=VALUE")
        out[key] = value
    return out


def parse_label_filters(values: list[str]) -> dict[str, str]:
    """`-l key=value` (repeatable) → the labels every listed job must have."""
    return parse_pairs(values, "--label")


def list_jobs(
    client: Client | ReadClient,
    *,
    all_users: bool,
    states: list[job_state_pb2.JobState],
    project: str,
    experiment: str,
    limit: int,
    labels: dict[str, str] | None = None,
) -> list[job_pb2.Job]:
    """Jobs newest first, following pages up to `limit`."""
    jobs: list[job_pb2.Job] = []
    token = ""
    while len(jobs) < limit:
        req = control_service_pb2.ListJobsRequest(
            project=project,
            owner="*" if all_users else "",
            states=states,
            experiment=experiment,
            page_size=min(limit - len(jobs), 1000),
            page_token=token,
            labels=labels or {},
        )
        resp = client.call(client.control.ListJobs, req)
        jobs.extend(resp.jobs)
        token = resp.next_page_token
        if not token or not resp.jobs:
            break
    return jobs[:limit]


def job_ls(
    st: AppState,
    output: Format | None,
    *,
    all_users: bool,
    state: list[str] | None,
    project: str,
    experiment: str,
    limit: int,
    label: list[str] | None,
) -> int:
    """`sf job ls`: the caller's jobs (every user's with `all_users`), newest first, as a table or JSON."""
    out = st.output(output)
    client = st.reader()
    jobs = list_jobs(
        client,
        all_users=all_users,
        states=parse_states(list(state or [])),
        project=project,
        experiment=experiment,
        limit=limit,
        labels=parse_label_filters(list(label or [])),
    )
    if out.json:
        out.data({"jobs": [message_to_dict(j) for j in jobs]})
    elif not jobs:
        out.info("no jobs")
    elif (text := tables.jobs_text(jobs)) is not None:  # into a pipe: rich's layout without rich
        out.write(text)
    else:
        from cli import render  # rich: a terminal, or a table only rich can lay out

        out.show(render.jobs_table(jobs))
    return EXIT_OK


def job_status(st: AppState, output: Format | None, job_id: str) -> int:
    """`sf job status`: one job (an id, or "latest") as plain lines (a pipe), a panel (a terminal) or JSON."""
    out = st.output(output)
    job = resolve_job_id(st.reader(), job_id)
    if out.json:
        out.data({"job": message_to_dict(job)})
        return EXIT_OK
    from cli import jobtext  # text output only

    if (text := jobtext.status_text(job)) is not None:  # into a pipe: plain lines without rich
        out.write(text)
    else:
        from cli import render  # rich: a terminal, or text only rich prints as it should

        out.show(render.job_panel(job))
    return EXIT_OK


def job_logs(st: AppState, output: Format | None, job_id: str, *, follow: bool, lines: int | None) -> int:
    """`sf job logs`: a job's stored lines (the last `lines`; None: 100 when following, else all),
    then, with `follow`, new ones until it ends. Exit code: 0, or 1 when a followed job did not
    SUCCEED."""
    out = st.output(output)
    client = st.client()
    job = resolve_job_id(client, job_id)
    tail = lines if lines is not None else (100 if follow else 0)
    final = follow_logs(client, job.job_id, out, tail=tail, follow=follow)
    if follow and final is not None:
        out.info(f"job {job.job_id} ended {state_name(final)}")
        return exit_code_for(final)
    return EXIT_OK
