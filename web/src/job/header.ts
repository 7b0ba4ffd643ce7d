// The job's header: state, where and what it runs, its times, why it waits or why it failed.
import { facts, h, replace } from "../dom";
import { duration, date, failureClassName, pools, stateBadge, stateName, time, waitReasonName } from "../format";
import { JobState } from "../../../gen/ts/starforge/job/v1/job_state_pb";
import { ObservabilityMode } from "../../../gen/ts/starforge/job/v1/job_spec_pb";
import { ImageSource, type Job } from "../../../gen/ts/starforge/job/v1/job_pb";

function runtime(job: Job): string {
  const start = date(job.startTime);
  if (!start) return "";
  const end = date(job.endTime) ?? new Date();
  return duration((end.getTime() - start.getTime()) / 1000);
}

// The image, and for "host" what it means: no container (docs/images.md).
function image(job: Job): HTMLElement | string {
  if (!job.image) return "";
  if (job.image === "host") return h("span", {}, h("code", {}, "host"), " (no container: the fleet's own environment)");
  return h("code", {}, job.image);
}

// Which source of the resolution order gave the image: "host runtime: fleet local declares …".
function imageSource(job: Job): string {
  if (job.imageSource === ImageSource.UNSPECIFIED) return "";
  const name = (ImageSource[job.imageSource] ?? "").toLowerCase().replace(/_/g, " ");
  return job.imageSourceDetail ? `${name}: ${job.imageSourceDetail}` : name;
}

function framework(job: Job): string {
  if (!job.frameworkVersion) return "";
  return job.runtimeId ? `${job.frameworkVersion} (runtime ${job.runtimeId})` : job.frameworkVersion;
}

function warningsBox(job: Job): HTMLElement | null {
  if (!job.warnings.length) return null;
  return h(
    "div",
    { class: "notice wait", id: "job-warnings" },
    h("strong", {}, "Warnings at submit"),
    h("ul", {}, ...job.warnings.map((w) => h("li", {}, w))),
  );
}

/** External observability: a link to the job's tracker. Only http(s) URLs become links (the URL
 * is the submitter's text; admission refuses others, and a `javascript:` link must never render). */
function tracker(job: Job): HTMLElement | string {
  const o = job.spec?.observability;
  if (!o || o.mode !== ObservabilityMode.EXTERNAL || !o.url) return "";
  const tool = o.tool ? h("span", { class: "muted" }, ` (${o.tool})`) : null;
  if (!/^https?:\/\//i.test(o.url)) return h("span", {}, h("code", {}, o.url), tool);
  return h(
    "span",
    {},
    h("a", { id: "job-tracker", href: o.url, target: "_blank", rel: "noopener noreferrer" }, o.url),
    tool,
  );
}

function waitBox(job: Job): HTMLElement | null {
  if (job.state !== JobState.QUEUED || !job.wait) return null;
  const w = job.wait;
  return h(
    "div",
    { class: "notice wait", id: "job-wait" },
    h("strong", {}, "Waiting"),
    waitReasonName(w.reason) ? ` (${waitReasonName(w.reason)})` : "",
    w.queuePosition > 0 ? ` — position ${w.queuePosition}${w.queue ? ` in queue ${w.queue}` : ""}` : "",
    w.message ? h("div", {}, w.message) : null,
  );
}

function diagnosisBox(job: Job): HTMLElement | null {
  const d = job.diagnosis;
  if (job.state !== JobState.FAILED || !d) return null;
  return h(
    "div",
    { class: "notice failure", id: "job-diagnosis" },
    h(
      "div",
      {},
      h("strong", {}, "Failed"),
      failureClassName(d.failureClass) ? h("span", { class: "badge reason" }, failureClassName(d.failureClass)) : null,
      d.exitCode !== undefined ? h("span", { class: "muted" }, ` exit code ${d.exitCode}`) : null,
      d.retryable ? h("span", { class: "muted" }, " · retried automatically") : null,
    ),
    d.summary ? h("p", { class: "summary" }, d.summary) : null,
    d.hint ? h("p", { class: "diag-hint" }, "Hint: ", d.hint) : null,
    d.logTail.length ? h("pre", { class: "log-tail" }, d.logTail.join("\n")) : null,
  );
}

export function header(): { el: HTMLElement; update: (job: Job) => void } {
  const el = h("section", { class: "job-header" });
  const update = (job: Job): void => {
    const labels = Object.entries(job.labels).map(([k, v]) => `${k}=${v}`).join(", ");
    replace(
      el,
      h(
        "div",
        { class: "title" },
        h("h1", {}, job.experiment || job.jobId, job.stage ? h("span", { class: "muted" }, ` · ${job.stage}`) : null),
        h("span", { id: "job-state", "data-state": stateName(job.state) }, stateBadge(job.state)),
      ),
      facts([
        ["Job", h("code", {}, job.jobId)],
        ["Project", job.project],
        ["Method", job.method],
        ["Owner", job.owner],
        ["Pools", pools(job.pools)],
        ["Image", image(job)],
        ["Image from", imageSource(job)],
        ["Framework", framework(job)],
        ["Fleet", job.fleet],
        ["Tracker", tracker(job)],
        ["Created", time(job.createTime)],
        ["Started", time(job.startTime)],
        ["Ended", time(job.endTime)],
        ["Run time", runtime(job)],
        ["Retries", job.retryBudget > 0 ? `${job.retriesUsed} of ${job.retryBudget}` : ""],
        ["Parent job", job.parentJobId ? h("a", { href: `#/jobs/${job.parentJobId}` }, job.parentJobId) : ""],
        ["Output", job.outDir ? h("code", {}, job.outDir) : ""],
        ["Labels", labels],
      ]),
      warningsBox(job),
      waitBox(job),
      diagnosisBox(job),
    );
  };
  return { el, update };
}
