// Live logs: StreamJobLogs with follow (the last 500 lines, then new ones as they come). When the
// stream drops, it reconnects after the last line shown (after_attempt_number/after_offset), so no
// line is lost or shown twice. The view scrolls along while the reader is at the bottom.
import { control, errorLine, isAbort } from "../api";
import { h, replace, sleep } from "../dom";
import { stateName } from "../format";
import { testState } from "../teststate";
import type { JobModel } from "./model";
import { LogStream } from "../../../gen/ts/starforge/job/v1/telemetry_pb";
import type { LogLine } from "../../../gen/ts/starforge/job/v1/telemetry_pb";

const TAIL = 500;
const MAX_DOM_LINES = 5000;

export function logView(model: JobModel, signal: AbortSignal): HTMLElement {
  const pre = h("div", { id: "job-log", class: "log", "data-lines": 0, tabindex: 0 });
  const status = h("span", { id: "log-status", class: "muted" }, "connecting…");
  let lines = 0;
  let lastAttempt = 0;
  let cursor: { attempt: number; offset: bigint } | null = null;

  const add = (batch: LogLine[]): void => {
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 24;
    const frag = document.createDocumentFragment();
    for (const line of batch) {
      if (line.attemptNumber !== lastAttempt) {
        lastAttempt = line.attemptNumber;
        frag.appendChild(h("div", { class: "log-attempt" }, `── attempt ${line.attemptNumber} ──`));
      }
      const stream = LogStream[line.stream]?.toLowerCase() ?? "stdout";
      frag.appendChild(h("div", { class: `log-line ${stream}` }, line.text));
      cursor = { attempt: line.attemptNumber, offset: line.offset };
    }
    pre.appendChild(frag);
    while (pre.childElementCount > MAX_DOM_LINES) pre.firstElementChild?.remove();
    lines += batch.length;
    pre.dataset.lines = String(lines);
    testState.logLines = lines;
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  };

  const follow = async (): Promise<void> => {
    testState.logLines = 0;
    while (!signal.aborted) {
      let ended = false;
      try {
        const req = cursor
          ? { jobId: model.jobId, follow: true, afterAttemptNumber: cursor.attempt, afterOffset: cursor.offset }
          : { jobId: model.jobId, follow: true, tailLines: TAIL };
        replace(status, "following");
        for await (const r of control.streamJobLogs(req, { signal })) {
          if (r.lines.length) add(r.lines);
          if (r.finalState) {
            ended = true;
            replace(status, `job ended ${stateName(r.finalState)}`);
          }
        }
      } catch (err) {
        if (isAbort(err, signal)) return;
        replace(status, h("span", { class: "error" }, `log stream dropped (${errorLine(err)}); reconnecting…`));
        await sleep(1500, signal);
        continue;
      }
      if (ended || model.terminal) {
        if (!ended) replace(status, "job ended");
        await model.untilActive(signal); // Resume / Retry: keep following from the cursor
      } else {
        await sleep(1000, signal);
      }
    }
  };
  void follow();

  return h(
    "section",
    { class: "panel logs" },
    h("div", { class: "panel-head" }, h("h2", {}, "Logs"), status),
    pre,
  );
}
