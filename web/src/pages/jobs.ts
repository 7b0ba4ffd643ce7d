// The job list: filters by project, user and state (kept in the URL), refreshed every few seconds.
import { control, errorLine, isAbort } from "../api";
import { h, replace, sleep } from "../dom";
import { age, stateBadge, stateName, STATES, time, waitReasonName } from "../format";
import { href, setQuery } from "../router";
import type { Session } from "../session";
import { JobState } from "../../../gen/ts/starforge/job/v1/job_state_pb";
import type { Job } from "../../../gen/ts/starforge/job/v1/job_pb";

const REFRESH_MS = 2000;
const PAGE_SIZE = 200;

interface Filters {
  project: string;
  user: string;
  everyone: boolean;
  state: string;
}

function readFilters(q: URLSearchParams): Filters {
  return {
    project: q.get("project") ?? "",
    user: q.get("user") ?? "",
    everyone: q.get("everyone") === "1",
    state: q.get("state") ?? "",
  };
}

function waitCell(job: Job): HTMLElement | string {
  if (job.state !== JobState.QUEUED || !job.wait) return "";
  const w = job.wait;
  const pos = w.queuePosition > 0 ? `#${w.queuePosition}${w.queue ? ` in ${w.queue}` : ""}` : "";
  return h(
    "div",
    { class: "wait" },
    pos ? h("span", { class: "queue-pos" }, pos) : null,
    waitReasonName(w.reason) ? h("span", { class: "badge reason" }, waitReasonName(w.reason)) : null,
    w.message ? h("div", { class: "wait-message muted" }, w.message) : null,
  );
}

function row(job: Job): HTMLElement {
  const link = href(["jobs", job.jobId]);
  return h(
    "tr",
    { "data-job-id": job.jobId, "data-state": stateName(job.state) },
    h("td", {}, h("a", { href: link, class: "mono" }, job.jobId)),
    h("td", {}, job.experiment, job.stage ? h("span", { class: "muted" }, ` · ${job.stage}`) : null),
    h("td", {}, job.method),
    h("td", {}, job.owner),
    h("td", {}, stateBadge(job.state)),
    h("td", { class: "wait-cell" }, waitCell(job)),
    h("td", { title: time(job.createTime) }, age(job.createTime)),
    h("td", { class: "num" }, String(job.attempts.length)),
  );
}

export function jobsPage(query: URLSearchParams, s: Session, signal: AbortSignal): HTMLElement {
  const f = readFilters(query);
  const project = h("input", { id: "filter-project", placeholder: "@user/lab", value: f.project });
  const user = h("input", { id: "filter-user", placeholder: s.user, value: f.user });
  const everyone = h("input", { id: "filter-everyone", type: "checkbox" });
  everyone.checked = f.everyone && s.admin;
  const state = h(
    "select",
    { id: "filter-state" },
    h("option", { value: "" }, "any state"),
    STATES.map((st) => h("option", { value: stateName(st) }, stateName(st).toLowerCase())),
  );
  state.value = f.state;
  const auto = h("input", { id: "auto-refresh", type: "checkbox" });
  auto.checked = true;
  const status = h("p", { id: "jobs-error", class: "error", role: "alert" });
  const tbody = h("tbody", {});
  const more = h("p", { class: "muted" });

  const current = (): Filters => ({
    project: project.value.trim(),
    user: user.value.trim(),
    everyone: everyone.checked,
    state: state.value,
  });

  let generation = 0;
  async function load(): Promise<void> {
    const mine = ++generation;
    const c = current();
    user.disabled = c.everyone;
    setQuery({ project: c.project, user: c.user, everyone: c.everyone ? "1" : "", state: c.state });
    try {
      const states = c.state ? [JobState[c.state as keyof typeof JobState]] : [];
      const r = await control.listJobs(
        { project: c.project, owner: c.everyone ? "*" : c.user, states, pageSize: PAGE_SIZE },
        { signal },
      );
      if (mine !== generation) return;
      replace(status);
      replace(
        tbody,
        r.jobs.length ? r.jobs.map(row) : h("tr", {}, h("td", { colspan: 8, class: "muted empty" }, "No jobs.")),
      );
      replace(more, r.nextPageToken ? `Showing the newest ${PAGE_SIZE}; narrow the filters to see older jobs.` : "");
    } catch (err) {
      if (!isAbort(err, signal)) replace(status, errorLine(err));
    }
  }

  for (const el of [project, user]) el.addEventListener("change", () => void load());
  for (const el of [everyone, state]) el.addEventListener("change", () => void load());

  void (async () => {
    while (!signal.aborted) {
      if (auto.checked || generation === 0) await load();
      await sleep(REFRESH_MS, signal);
    }
  })();

  return h(
    "section",
    { class: "page jobs" },
    h("h1", {}, "Jobs"),
    h(
      "form",
      {
        class: "filters",
        onsubmit: (ev: Event) => {
          ev.preventDefault();
          void load();
        },
      },
      h("label", {}, "Project", project),
      h("label", {}, "User", user),
      s.admin ? h("label", { class: "check" }, everyone, "everyone") : null,
      h("label", {}, "State", state),
      h("label", { class: "check" }, auto, "auto-refresh"),
    ),
    status,
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { id: "jobs-table", class: "grid" },
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ["Job", "Experiment", "Method", "Owner", "State", "Queue", "Age", "Attempts"].map((t) => h("th", {}, t)),
          ),
        ),
        tbody,
      ),
    ),
    more,
  );
}
