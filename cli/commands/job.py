"""`sf job ...`: list, inspect, follow and control jobs.

The bodies of `ls`, `status` and `logs` live in `cli.commands.job_read`, shared with the fast path
(`cli.fastpath`); their options are defined here, and tests/unit/cli/test_fastpath.py checks that
the fast path accepts exactly these.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from starforge_api.control.v1 import control_service_pb2

from cli.client import Client
from cli.commands import job_read
from cli.commands.common import OutputOpt
from cli.context import app_state
from cli.errors import usage
from cli.follow import exit_code_for, resolve_job_id, state_name, watch_job
from cli.output import Output, human_bytes, message_to_dict

app = typer.Typer(
    help="List, inspect, follow and control jobs. Example: `sf job ls --state running`.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

JobIdArg = Annotated[str, typer.Argument(help="Job id, or `latest` for your newest job.", metavar="JOB_ID")]


@app.command("ls")
def ls_cmd(
    ctx: typer.Context,
    all_users: Annotated[bool, typer.Option("--all", "-a", help="Jobs of every user (admins).")] = False,
    state: Annotated[list[str] | None, typer.Option("--state", help="Only jobs in this state (repeat).")] = None,
    project: Annotated[str, typer.Option("--project", help='Only this project ("@alice/lab").')] = "",
    experiment: Annotated[str, typer.Option("--experiment", help="Only this experiment.")] = "",
    limit: Annotated[int, typer.Option("--limit", "-n", help="At most this many jobs.", min=1)] = 50,
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label", "-l", help="Only jobs with this label, KEY=VALUE (repeat: all must match).", metavar="K=V"
        ),
    ] = None,
    output: OutputOpt = None,
) -> None:
    """List your jobs, newest first: state, why queued jobs wait, age, attempts.

    Examples: `sf job ls --state queued --state running`, `sf job ls -l team=rl -l sweep=lr`
    """
    code = job_read.job_ls(
        app_state(ctx),
        output,
        all_users=all_users,
        state=state,
        project=project,
        experiment=experiment,
        limit=limit,
        label=label,
    )
    if code:
        raise typer.Exit(code)


@app.command("status")
def status_cmd(ctx: typer.Context, job_id: JobIdArg = "latest", output: OutputOpt = None) -> None:
    """Show one job: state, wait reason, diagnosis, exit code, every attempt, provenance.

    Example: `sf job status latest`
    """
    code = job_read.job_status(app_state(ctx), output, job_id)
    if code:
        raise typer.Exit(code)


@app.command("logs")
def logs_cmd(
    ctx: typer.Context,
    job_id: JobIdArg = "latest",
    follow: Annotated[
        bool,
        typer.Option(
            "--follow/--no-follow",
            "-f/-F",
            help="Follow until the job ends (the default); --no-follow prints what is stored and exits.",
        ),
    ] = True,
    lines: Annotated[
        int | None,
        typer.Option(
            "--lines",
            "-n",
            help="Last N lines first (0 = full history; default: 100 when following, all with --no-follow).",
            min=0,
        ),
    ] = None,
    output: OutputOpt = None,
) -> None:
    """Follow a job's log lines (stdout, stderr and platform lines), raw, in order, until it ends.

    Following survives console restarts and exits 0 only if the job SUCCEEDED. `--no-follow` prints
    the stored lines and exits 0.

    Examples: `sf job logs` (the latest job), `sf job logs j0abc123 -n 0` (full history, then follow),
    `sf job logs j0abc123 --no-follow`
    """
    code = job_read.job_logs(app_state(ctx), output, job_id, follow=follow, lines=lines)
    if code:
        raise typer.Exit(code)


def _control(
    ctx: typer.Context,
    job_id: str,
    output: Any,
    rpc: Callable[[Client], Any],
    make: Callable[[str], Any],
    verb: str,
) -> None:
    st = app_state(ctx)
    out: Output = st.output(output)
    client = st.client()
    if job_id == "latest":  # the control RPCs take ids only; resolve it like status does
        job_id = resolve_job_id(client, job_id).job_id
    job = client.call(rpc(client), make(job_id)).job
    if out.json:
        out.data({"job": message_to_dict(job)})
        return
    out.success(f"{verb} {job.job_id}: now {state_name(job.state)}")


@app.command("stop")
def stop_cmd(
    ctx: typer.Context,
    job_id: JobIdArg,
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded on the attempt).")] = "",
    output: OutputOpt = None,
) -> None:
    """Stop a job: a queued one at once, a running one on its backend. Example: `sf job stop j0abc123`"""
    _control(
        ctx,
        job_id,
        output,
        lambda c: c.control.StopJob,
        lambda j: control_service_pb2.StopJobRequest(job_id=j, reason=reason),
        "stopping",
    )


@app.command("pause")
def pause_cmd(
    ctx: typer.Context,
    job_id: JobIdArg,
    reason: Annotated[str, typer.Option("--reason", help="Why.")] = "",
    output: OutputOpt = None,
) -> None:
    """Pause a running job: GPUs are released, its checkpoint kept. Example: `sf job pause j0abc123`"""
    _control(
        ctx,
        job_id,
        output,
        lambda c: c.control.PauseJob,
        lambda j: control_service_pb2.PauseJobRequest(job_id=j, reason=reason),
        "pausing",
    )


@app.command("resume")
def resume_cmd(ctx: typer.Context, job_id: JobIdArg, output: OutputOpt = None) -> None:
    """Queue a paused or stopped job again, from its latest checkpoint. Example: `sf job resume j0abc123`"""
    _control(
        ctx,
        job_id,
        output,
        lambda c: c.control.ResumeJob,
        lambda j: control_service_pb2.ResumeJobRequest(job_id=j),
        "resumed",
    )


@app.command("retry")
def retry_cmd(ctx: typer.Context, job_id: JobIdArg, output: OutputOpt = None) -> None:
    """Queue a FAILED or STOPPED job again: a new attempt of the same run id that resumes from its latest
    checkpoint (FORGE_RESUME=1, same FORGE_OUT_DIR). Example: `sf job retry j0abc123`"""
    _control(
        ctx,
        job_id,
        output,
        lambda c: c.control.RetryJob,
        lambda j: control_service_pb2.RetryJobRequest(job_id=j),
        "retrying",
    )


@app.command("watch")
def watch_cmd(ctx: typer.Context, job_id: JobIdArg = "latest", output: OutputOpt = None) -> None:
    """Print a job's state transitions until it ends; exit 0 only if it SUCCEEDED.

    Example: `sf job watch latest`
    """
    st = app_state(ctx)
    out = st.output(output)
    client = st.client()
    job = resolve_job_id(client, job_id)
    final = watch_job(client, job.job_id, out)
    code = exit_code_for(final)
    if code:
        raise typer.Exit(code)


@app.command("metrics")
def metrics_cmd(
    ctx: typer.Context,
    job_id: JobIdArg = "latest",
    name: Annotated[list[str] | None, typer.Option("--name", help="Only this metric (repeat).")] = None,
    points: Annotated[bool, typer.Option("--points", help="With -o json: include every point.")] = False,
    output: OutputOpt = None,
) -> None:
    """Show a job's metrics: latest value, min, max and a sparkline per series.

    Example: `sf job metrics latest --name loss`
    """
    from cli import render

    st = app_state(ctx)
    out = st.output(output)
    client = st.client()
    resp = client.call(
        client.control.GetJobMetrics, control_service_pb2.GetJobMetricsRequest(job_id=job_id, names=name or [])
    )
    if out.json:
        series = []
        for s in resp.series:
            item = render.series_summary(s)
            if points:
                item["data"] = [message_to_dict(p) for p in s.points]
            series.append(item)
        out.data({"job_id": job_id, "series": series})
    elif not resp.series:
        out.info("no metrics reported (yet)")
    else:
        out.show(render.metrics_table(resp.series))


@app.command("compare")
def compare_cmd(
    ctx: typer.Context,
    job_ids: Annotated[list[str] | None, typer.Argument(help="Jobs to compare.", metavar="JOB_ID...")] = None,
    experiment: Annotated[
        str, typer.Option("--experiment", "-e", help="Compare the latest runs of this experiment instead.")
    ] = "",
    last: Annotated[int, typer.Option("--last", help="With --experiment: how many recent runs.")] = 5,
    name: Annotated[list[str] | None, typer.Option("--name", help="Only this metric (repeat).")] = None,
    output: OutputOpt = None,
) -> None:
    """Compare runs side by side: per metric, each run's latest, best and trend, and what differed
    (overrides, commit).

    Example: `sf job compare -e my-grpo --last 3 --name loss`
    """
    from cli import render

    st = app_state(ctx)
    out = st.output(output)
    client = st.client()
    if bool(job_ids) == bool(experiment):
        raise usage("name the jobs to compare, or one experiment with --experiment (not both)")
    if experiment:
        listed = client.call(
            client.control.ListJobs,
            control_service_pb2.ListJobsRequest(experiment=experiment, page_size=max(1, min(last, 50))),
        )
        jobs = list(listed.jobs)
        if not jobs:
            raise usage(f"no runs of experiment {experiment!r}")
    else:
        jobs = [
            client.call(client.control.GetJob, control_service_pb2.GetJobRequest(job_id=j)).job for j in job_ids or []
        ]
    runs = []
    for job in jobs:
        resp = client.call(
            client.control.GetJobMetrics,
            control_service_pb2.GetJobMetricsRequest(job_id=job.job_id, names=name or [], max_points=200),
        )
        runs.append((job, list(resp.series)))
    if out.json:
        out.data(
            {
                "runs": [
                    {
                        "job_id": job.job_id,
                        "state": state_name(job.state),
                        "overrides": {o.key: o.value for o in job.spec.overrides},
                        "git_commit": job.provenance.git_commit,
                        "series": [render.series_summary(s) for s in series],
                    }
                    for job, series in runs
                ]
            }
        )
        return
    out.show(render.compare_table(runs))


@app.command("samples")
def samples_cmd(
    ctx: typer.Context,
    job_id: JobIdArg = "latest",
    limit: Annotated[int, typer.Option("--limit", "-n", help="How many, newest first.")] = 20,
    width: Annotated[int, typer.Option("--width", help="Characters shown of each prompt and completion.")] = 80,
    output: OutputOpt = None,
) -> None:
    """Show samples a job reported with `starforge.sample(...)` (e.g. RL generations and their rewards).

    Example: `sf job samples latest -n 5`
    """
    from cli import render

    st = app_state(ctx)
    out = st.output(output)
    client = st.client()
    if limit < 1:
        raise usage("--limit must be at least 1")
    resp = client.call(
        client.control.GetJobSamples, control_service_pb2.GetJobSamplesRequest(job_id=job_id, limit=limit)
    )
    if out.json:
        out.data({"job_id": job_id, "samples": [message_to_dict(s) for s in resp.samples]})
    elif not resp.samples:
        out.info("no samples reported (yet)")
    else:
        out.show(render.samples_table(resp.samples, width))


@app.command("artifacts")
def artifacts_cmd(ctx: typer.Context, job_id: JobIdArg = "latest", output: OutputOpt = None) -> None:
    """List what a job left in its FORGE_OUT_DIR (checkpoints, exports, eval results): path, size,
    sha256. Links the job created are listed as links; they are never followed or downloaded.
    Into a pipe it prints `<sha256>  <bytes>  <path>` lines.

    Example: `sf job artifacts latest -o json`
    """
    from cli import artifacts, render

    st = app_state(ctx)
    out = st.output(output)
    found, attempt_id = artifacts.list_all(st.client(), job_id)
    if out.json:
        out.data({"job_id": job_id, "attempt_id": attempt_id, "artifacts": [artifacts.artifact_dict(a) for a in found]})
    elif not found:
        out.info(f"no artifacts: the out dir of attempt {attempt_id} is empty")
    elif out.stdout_tty:
        out.show(render.artifacts_table(found))
    else:
        for line in render.artifact_lines(found):
            out.line(line)


@app.command("download")
def download_cmd(
    ctx: typer.Context,
    job_id: JobIdArg,
    path: Annotated[
        str,
        typer.Argument(help="A file, or a directory (all files under it); empty for all.", metavar="PATH"),
    ] = "",
    to: Annotated[
        Path, typer.Option("--to", help="Directory to write into (paths below it as in the out dir).")
    ] = Path("."),
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace local files whose content differs from the job's.")
    ] = False,
    output: OutputOpt = None,
) -> None:
    """Download artifacts of a job through the console, from whichever executor holds them.

    An interrupted download continues where it stopped (the `.sfpart` file), and every file is
    checked against its sha256 before it takes its name. Links are never downloaded.

    Example: `sf job download latest checkpoints/step-100 --to ./ckpt`
    """
    from cli import artifacts

    st = app_state(ctx)
    out = st.output(output)
    if to.exists() and not to.is_dir():
        raise usage(f"--to {to}: not a directory")
    client = st.client()
    found, attempt_id = artifacts.list_all(client, job_id)
    chosen = artifacts.select(found, path)
    fetched = artifacts.download(client, job_id, chosen, to, out, overwrite=overwrite)
    if out.json:
        out.data({"job_id": job_id, "attempt_id": attempt_id, "to": str(to), "files": [f.as_dict() for f in fetched]})
        return
    for f in fetched:
        note = f" (resumed at {human_bytes(f.resumed_from)})" if f.status == "resumed" else ""
        out.info(f"{f.status} {f.path} {human_bytes(f.size)}{note}")
    out.success(f"{len(fetched)} file(s) in {to}")
