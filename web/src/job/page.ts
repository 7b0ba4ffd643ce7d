// One job: header, buttons, live logs, metric charts, artifacts, attempts and provenance.
import { h, replace } from "../dom";
import { stateName } from "../format";
import { href } from "../router";
import type { Session } from "../session";
import { testState } from "../teststate";
import { actionBar } from "./actions";
import { artifactsPanel } from "./artifacts";
import { attemptsTable, provenance } from "./details";
import { header } from "./header";
import { logView } from "./logs";
import { metricsPanel } from "./metrics";
import { JobModel } from "./model";

export function jobPage(jobId: string, s: Session, signal: AbortSignal): HTMLElement {
  const model = new JobModel(jobId);
  const error = h("p", { id: "job-error", class: "error", role: "alert" });
  const head = header();
  const attempts = attemptsTable();
  const prov = provenance();
  const body = h("div", { class: "job-body" }, h("p", { class: "muted" }, "Loading…"));

  testState.jobId = jobId;
  testState.jobState = "";
  let started = false;
  model.subscribe((job) => {
    testState.jobState = stateName(job.state);
    head.update(job);
    attempts.update(job);
    prov.update(job);
    if (!started) {
      started = true;
      replace(
        body,
        actionBar(model, s),
        h("div", { class: "columns" }, logView(model, signal), metricsPanel(model, s, signal)),
        artifactsPanel(model, signal),
        attempts.el,
        prov.el,
      );
    }
  });
  void model.run(signal, (message) => replace(error, message));

  return h(
    "section",
    { class: "page job", "data-job-id": jobId },
    h("a", { class: "back", href: href(["jobs"]) }, "← Jobs"),
    head.el,
    error,
    body,
  );
}
