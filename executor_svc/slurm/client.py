"""Async slurmrestd client for the Slurm executor (httpx, JWT auth, data_parser pinned in `api.py`).

Every call has a timeout, every answer is checked (HTTP status and slurmrestd's `errors[]`) and
parsed into `models` dataclasses, and every failure is a `common.errors` error that quotes Slurm's
own message: a refused token is Unauthenticated, an unreachable slurmrestd or slurmctld
Unavailable, a slow one DeadlineExceeded, a job Slurm refuses InvalidArgument.

    async with SlurmClient("http://127.0.0.1:6820", user="starforge", token=jwt) as slurm:
        job_id = (await slurm.submit(BatchJob(...), JobComponent(gres_per_node="gpu:2"))).job_id
        job = await slurm.get_job(job_id)            # None once slurmctld forgot it
        await slurm.cancel(job_id)                   # False if it had already ended
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import httpx

from common import errors
from executor_svc.slurm import api
from executor_svc.slurm.errors import describe, error_for
from executor_svc.slurm.models import (
    BatchJob,
    Controller,
    JobComponent,
    PingInfo,
    SlurmJob,
    SubmittedJob,
    group_components,
    parse_job,
)

log = logging.getLogger(__name__)
DEFAULT_TIMEOUT_S = 10.0


class SlurmClient:
    """One slurmrestd, one Slurm user. Safe for concurrent calls from one event loop."""

    def __init__(
        self,
        base_url: str,
        *,
        user: str,
        token: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not user or not token:
            raise errors.InvalidArgument(
                message="the Slurm executor needs a Slurm user name and a JWT (`scontrol token username=<user>`)",
                field_violations=tuple(
                    errors.FieldViolation(name, "must not be empty")
                    for name, value in (("user", user), ("token", token))
                    if not value
                ),
            )
        self.base_url = base_url.rstrip("/")
        self.user = user
        self._timeout_s = timeout_s
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers={api.USER_HEADER: user, api.TOKEN_HEADER: token, "Accept": "application/json"},
            timeout=httpx.Timeout(timeout_s),
            trust_env=False,  # never route a cluster's API through a proxy from the environment
            transport=transport,
        )

    async def __aenter__(self) -> SlurmClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def set_token(self, token: str) -> None:
        """Use a fresh JWT from now on (tokens expire; the executor renews them)."""
        self._http.headers[api.TOKEN_HEADER] = token

    # -- transport ---------------------------------------------------------------------------------

    async def _call(
        self,
        method: str,
        path: str,
        *,
        what: str,
        json: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
        allow: Sequence[int] = (),
        run_as: str = "",
        log_warnings: bool = True,
    ) -> dict[str, Any]:
        """One request to the pinned API; the parsed body, or a common.errors error.

        Slurm error numbers in `allow` do not raise: the caller inspects `errors[]` itself.
        `run_as`: act as this user instead of the client's (X-SLURM-USER-NAME; slurmrestd allows
        it only when the token belongs to SlurmUser or root).
        """
        url = api.PREFIX + path
        headers = {api.USER_HEADER: run_as} if run_as else None
        try:
            response = await self._http.request(method, url, json=json, params=params, headers=headers)
        except httpx.TimeoutException as exc:
            raise errors.DeadlineExceeded(
                message=f"slurmrestd at {self.base_url} did not answer {what} within {self._timeout_s:g} s",
                metadata={"base_url": self.base_url},
            ) from exc
        except httpx.TransportError as exc:
            raise errors.Unavailable(
                message=f"cannot reach slurmrestd at {self.base_url} ({what}): {exc or type(exc).__name__}",
                metadata={"base_url": self.base_url},
            ) from exc
        return self._check(response, what, allow, log_warnings)

    def _check(
        self, response: httpx.Response, what: str, allow: Sequence[int], log_warnings: bool = True
    ) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            # 401 comes as text/plain "Authentication failure"; proxies answer 502/503 in HTML.
            raise error_for(
                base_url=self.base_url, what=what, http_status=response.status_code, body_text=response.text
            )
        entries = body.get("errors") or []
        if not isinstance(entries, list):
            raise errors.Internal(message=f"slurmrestd at {self.base_url}: {what}: errors is not a list")
        blocking = [entry for entry in entries if int(entry.get("error_number") or 0) not in allow]
        if blocking or (response.status_code >= 400 and not entries):
            raise error_for(
                base_url=self.base_url,
                what=what,
                http_status=response.status_code,
                entries=blocking,
                body_text=response.text,
            )
        if (warnings := body.get("warnings")) and log_warnings:
            log.warning("slurmrestd at %s: %s: %s", self.base_url, what, describe(warnings))
        return body

    def _parse_jobs(self, body: Mapping[str, Any], what: str) -> list[SlurmJob]:
        raw = body.get("jobs")
        if not isinstance(raw, list):
            raise errors.Internal(message=f"slurmrestd at {self.base_url}: {what}: answer has no jobs[] list")
        try:
            return [parse_job(entry) for entry in raw]
        except (KeyError, TypeError, ValueError) as exc:
            raise errors.Internal(
                message=f"slurmrestd at {self.base_url}: {what}: unexpected job record for "
                f"data_parser {api.DATA_PARSER}: {exc!r}"
            ) from exc

    # -- operations --------------------------------------------------------------------------------

    async def ping(self) -> PingInfo:
        """slurmrestd's Slurm release and data_parser, and whether slurmctld answers.

        Raises Unavailable when slurmctld does not respond, Unauthenticated for a refused token:
        `/ping/` itself reports a refused token as "controller DOWN", so that case is told apart
        by one authenticated request (`/diag/`), which answers 511.
        """
        try:
            body = await self._call("GET", "/ping/", what="ping")
        except errors.NotFound as exc:
            raise errors.FailedPrecondition(
                message=f"slurmrestd at {self.base_url} does not serve data_parser {api.DATA_PARSER} "
                f"(Slurm 24.11 or newer is needed): {exc.message}",
                metadata={"base_url": self.base_url},
            ) from exc
        meta = body.get("meta") or {}
        release = str(((meta.get("slurm") or {}).get("release")) or "")
        parser = str(((meta.get("plugin") or {}).get("data_parser")) or "")
        if parser != api.DATA_PARSER_PLUGIN:
            raise errors.Internal(
                message=f"slurmrestd at {self.base_url} answered with {parser!r}, not {api.DATA_PARSER_PLUGIN!r}"
            )
        info = PingInfo(
            release=release,
            cluster=str(((meta.get("slurm") or {}).get("cluster")) or ""),
            data_parser=parser,
            controllers=tuple(
                Controller(
                    hostname=str(entry.get("hostname") or ""),
                    responding=bool(entry.get("responding")),
                    mode=str(entry.get("mode") or ""),
                )
                for entry in body.get("pings") or []
            ),
        )
        if not info.responding:
            await self._call("GET", "/diag/", what="ping (diagnostics)")  # raises Unauthenticated if so
            raise errors.Unavailable(
                message=f"slurmctld does not respond to slurmrestd at {self.base_url}: {info.controllers}",
                metadata={"base_url": self.base_url},
            )
        return info

    async def submit(self, job: BatchJob, resources: JobComponent | None = None, *, run_as: str = "") -> SubmittedJob:
        """Submit a batch job with one set of resources; its id once slurmctld accepted it.

        `run_as`: the Unix user the job runs as, when not the client's own (needs a token of
        SlurmUser or root)."""
        resources = resources or JobComponent()
        job.validate()
        resources.validate("resources")
        body = {"job": job.component_json(resources, first=True)}
        return await self._submit(body, f"submit job {job.name!r}", run_as)

    async def submit_heterogeneous(
        self, job: BatchJob, components: Sequence[JobComponent], *, run_as: str = ""
    ) -> SubmittedJob:
        """Submit a heterogeneous job (one component per entry; the script runs in the first).

        Steps reach the other components with `srun --het-group=N`. Its id is the leader's.
        `run_as` as for `submit`.
        """
        if len(components) < 2:
            raise errors.InvalidArgument(
                message=f"a heterogeneous job needs at least two components, got {len(components)}",
                field_violations=(errors.FieldViolation("components", "needs at least two entries"),),
            )
        job.validate()
        for index, component in enumerate(components):
            component.validate(f"components[{index}]")
        body = {"jobs": [job.component_json(c, first=i == 0) for i, c in enumerate(components)]}
        return await self._submit(body, f"submit heterogeneous job {job.name!r}", run_as)

    async def _submit(self, body: Mapping[str, Any], what: str, run_as: str) -> SubmittedJob:
        what += f" as {run_as!r}" if run_as else ""
        # The caller logs the warnings it does not expect (a held job's are expected).
        answer = await self._call("POST", "/job/submit", what=what, json=body, run_as=run_as, log_warnings=False)
        job_id = answer.get("job_id")
        if not isinstance(job_id, int) or job_id <= 0:
            raise errors.Internal(message=f"slurmrestd at {self.base_url}: {what}: no job_id in {answer!r:.300}")
        return SubmittedJob(
            job_id=job_id,
            warnings=tuple(describe([w]) for w in answer.get("warnings") or [] if not _held_notice(w)),
            user_message=str(answer.get("job_submit_user_msg") or ""),
        )

    async def release(self, job_id: int) -> None:
        """Release a job submitted held (`BatchJob.hold`): it becomes eligible to run."""
        await self._call("POST", f"/job/{int(job_id)}", what=f"release job {job_id}", json={"hold": False})

    async def release_all(self, job_ids: Sequence[int]) -> None:
        """`release` each job (every component of a heterogeneous job is held on its own)."""
        for job_id in job_ids:
            await self.release(job_id)

    async def get_job(self, job_id: int) -> SlurmJob | None:
        """The job (with its components if heterogeneous), or None when slurmctld does not know it.

        slurmctld forgets finished jobs after MinJobAge (300 s by default); without accounting
        (slurmdbd) there is no later record, so the executor must observe within that window.
        """
        what = f"get job {job_id}"
        try:
            body = await self._call("GET", f"/job/{int(job_id)}", what=what)
        except errors.NotFound:
            return None
        jobs = group_components(self._parse_jobs(body, what))
        return next((job for job in jobs if job.job_id == job_id), jobs[0] if jobs else None)

    async def list_jobs(self, labels: Mapping[str, str] | None = None) -> list[SlurmJob]:
        """Every job slurmctld still knows whose labels include all of `labels` (all jobs if None).

        Filtering happens here: slurmrestd cannot filter by comment. Heterogeneous jobs are returned
        once, as their leader with `components`.
        """
        body = await self._call("GET", "/jobs/", what="list jobs")
        jobs = group_components(self._parse_jobs(body, "list jobs"))
        wanted = dict(labels or {})
        return [job for job in jobs if all(job.labels.get(k) == v for k, v in wanted.items())]

    async def get_jobs(self, job_ids: Sequence[int]) -> dict[int, SlurmJob]:
        """Several jobs in one request (for observing many attempts); unknown ids are left out."""
        wanted = set(job_ids)
        return {job.job_id: job for job in await self.list_jobs() if job.job_id in wanted}

    async def cancel(self, job_id: int) -> bool:
        """Cancel the job (all components); True if it was pending or running, False if it had
        already ended or never existed. Never raises for those two cases.

        This is Slurm's own cancel (`scancel`): slurmd sends SIGCONT and SIGTERM to every process
        of the job, then SIGKILL after the cluster's KillWait, and the job ends CANCELLED (which
        maps to STOPPED). The grace period is KillWait, a cluster setting, not a per-call one: a
        job that exits on an earlier SIGTERM of ours would end FAILED/COMPLETED, not CANCELLED.
        """
        what = f"cancel job {job_id}"
        body = await self._call(
            "DELETE", f"/job/{int(job_id)}", what=what, allow=(api.ERR_INVALID_JOB_ID, api.ERR_ALREADY_DONE)
        )
        return self._signal_result(body, what)

    async def signal(self, job_id: int, signal_name: str, *, steps_only: bool = False) -> bool:
        """Send `signal_name` (e.g. "SIGUSR1") to every process of the job, batch script included
        (with `steps_only`: of its srun steps only, not the batch script), without cancelling it.
        False if the job had already ended or never existed."""
        what = f"signal {signal_name} to job {job_id}"
        body = await self._call(
            "DELETE",
            f"/job/{int(job_id)}",
            what=what,
            params={"signal": signal_name, "flags": "FULL_STEPS_ONLY" if steps_only else "FULL_JOB"},
            allow=(api.ERR_INVALID_JOB_ID, api.ERR_ALREADY_DONE),
        )
        return self._signal_result(body, what)

    def _signal_result(self, body: Mapping[str, Any], what: str) -> bool:
        """DELETE /job reports per-job results in `status[]`: empty means the signal was sent."""
        gone = (api.ERR_INVALID_JOB_ID, api.ERR_ALREADY_DONE)
        if any(int(entry.get("error_number") or 0) in gone for entry in body.get("errors") or []):
            return False
        failures = []
        for entry in body.get("status") or []:
            error = entry.get("error") or {}
            code = int(error.get("code") or 0)
            if code in gone:
                return False
            if code:
                failures.append(
                    {"error": error.get("string"), "description": error.get("message"), "error_number": code}
                )
        if failures:
            raise error_for(base_url=self.base_url, what=what, http_status=200, entries=failures)
        return True


def _held_notice(warning: Any) -> bool:
    """slurmctld's note that a job submitted held waits for a release (expected, not a problem)."""
    return isinstance(warning, Mapping) and "held state" in describe([warning])
