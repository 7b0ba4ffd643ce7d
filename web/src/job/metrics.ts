// Metric charts of a job: one chart per metric, polled every second while the job runs, with
// other runs of the same experiment overlaid on demand.
import { control, errorLine, isAbort } from "../api";
import { h, replace, sleep } from "../dom";
import { stateName, TERMINAL } from "../format";
import type { Session } from "../session";
import { testState } from "../teststate";
import { MetricChart, type Run } from "./chart";
import type { JobModel } from "./model";
import { RunMetrics } from "./series";
import type { Job } from "../../../gen/ts/starforge/job/v1/job_pb";

const POLL_MS = 1000;

interface Overlay {
  metrics: RunMetrics;
  /** The run had ended when it was listed: one fetch is enough. */
  ended: boolean;
  fetched: boolean;
}

export function metricsPanel(model: JobModel, s: Session, signal: AbortSignal): HTMLElement {
  const own = new RunMetrics(model.jobId);
  const overlays = new Map<string, Overlay>();
  const charts = new Map<string, MetricChart>();
  const grid = h("div", { class: "charts", id: "charts" }, h("p", { class: "muted" }, "No metrics reported yet."));
  const status = h("span", { id: "metrics-status", class: "muted" });
  const picker = h("div", { class: "overlay-list" }, h("p", { class: "muted" }, "Open to list other runs."));
  const overlayBox = h(
    "details",
    { class: "overlay", id: "overlay-runs" },
    h("summary", {}, "Overlay runs"),
    picker,
  );
  testState.charts = {};

  const draw = (): void => {
    const names = new Set(own.series.keys());
    for (const o of overlays.values()) for (const n of o.metrics.series.keys()) names.add(n);
    if (names.size && !charts.size) replace(grid);
    for (const name of [...names].sort()) {
      let chart = charts.get(name);
      const fresh = !chart;
      if (!chart) {
        chart = new MetricChart(name);
        const drawnOne = chart;
        chart.onDraw = () => {
          const st = testState.charts[drawnOne.metric];
          if (st) st.drawn = true;
        };
        chart.onZoom = (lo, hi) => {
          own
            .refine(drawnOne.metric, lo, hi, signal)
            .then((changed) => {
              if (changed) draw();
            })
            .catch((err: unknown) => {
              if (!isAbort(err, signal)) replace(status, h("span", { class: "error" }, errorLine(err)));
            });
        };
        charts.set(name, chart);
        grid.appendChild(chart.el);
      }
      const runs: Run[] = [{ label: model.jobId, ...(own.series.get(name) ?? { steps: [], values: [] }) }];
      for (const [id, o] of overlays) {
        const series = o.metrics.series.get(name);
        if (series) runs.push({ label: id, ...series });
      }
      const mine = own.series.get(name);
      testState.charts[name] = {
        drawn: fresh ? false : (testState.charts[name]?.drawn ?? false),
        points: mine?.steps.length ?? 0,
        lastStep: mine?.steps.at(-1) ?? -1,
        lastValue: mine?.values.at(-1) ?? null,
        series: runs.length,
      };
      chart.update(runs);
    }
  };

  const loadRuns = async (): Promise<void> => {
    const job = model.job;
    if (!job) return;
    try {
      const r = await control.listJobs(
        { project: job.project, experiment: job.experiment, owner: s.admin ? "*" : "", pageSize: 50 },
        { signal },
      );
      const others = r.jobs.filter((j) => j.jobId !== job.jobId);
      replace(picker, others.length ? others.map(overlayChoice) : h("p", { class: "muted" }, "No other runs."));
    } catch (err) {
      if (!isAbort(err, signal)) replace(picker, h("p", { class: "error" }, errorLine(err)));
    }
  };

  const overlayChoice = (j: Job): HTMLElement => {
    const box = h("input", { type: "checkbox", value: j.jobId, "data-overlay": j.jobId });
    box.checked = overlays.has(j.jobId);
    box.addEventListener("change", () => {
      if (box.checked) overlays.set(j.jobId, { metrics: new RunMetrics(j.jobId), ended: TERMINAL.has(j.state), fetched: false });
      else overlays.delete(j.jobId);
      for (const c of charts.values()) c.destroy();
      charts.clear();
      replace(grid);
      redraw = true;
      wake();
    });
    return h("label", { class: "check" }, box, h("code", {}, j.jobId), ` ${stateName(j.state).toLowerCase()}`);
  };
  overlayBox.addEventListener("toggle", () => {
    if (overlayBox.open) void loadRuns();
  });

  let redraw = false;
  let wake: () => void = () => {};
  const tick = async (): Promise<void> => {
    let changed = await own.poll(signal);
    for (const o of overlays.values()) {
      if (o.ended && o.fetched) continue;
      changed = (await o.metrics.poll(signal)) || changed;
      o.fetched = true;
    }
    if (changed || redraw) draw();
    redraw = false;
  };

  void (async () => {
    while (!signal.aborted) {
      const ending = model.terminal; // one more poll after the job ended, then wait for a resume
      try {
        await tick();
        replace(status);
      } catch (err) {
        if (isAbort(err, signal)) return;
        replace(status, h("span", { class: "error" }, errorLine(err)));
      }
      const overlaysLive = [...overlays.values()].some((o) => !o.ended);
      if (ending && !overlaysLive && !redraw) {
        // nothing will change until the job comes back or the overlay selection changes
        await Promise.race([model.untilActive(signal), new Promise<void>((resolve) => (wake = resolve))]);
      } else {
        await sleep(POLL_MS, signal);
      }
    }
  })();
  signal.addEventListener("abort", () => {
    for (const c of charts.values()) c.destroy();
  });

  return h(
    "section",
    { class: "panel metrics" },
    h("div", { class: "panel-head" }, h("h2", {}, "Metrics"), status),
    h("p", { class: "muted hint" }, "Drag across a chart to zoom into steps; double-click to zoom out."),
    overlayBox,
    grid,
  );
}
