// Live logs: StreamJobLogs with follow (the last 500 lines, then new ones as they come). When the
// stream drops, it reconnects after the last line shown (after_attempt_number/after_offset), so no
// line is lost or shown twice. The view scrolls along while the reader is at the bottom.
// "Load earlier" reads the 500 lines before the first one shown (before_attempt_number/
// before_offset) and puts them on top, keeping the reader's place; it goes until the history's
// first line. While the reader is at the bottom the view keeps the newest 5,000 lines; scrolled up
// (reading back), it keeps what was loaded, up to 50,000 lines.
import { control, errorLine, isAbort } from "../api";
import { h, replace, sleep } from "../dom";
import { stateName } from "../format";
import { testState } from "../teststate";
import type { JobModel } from "./model";
import { LogStream } from "../../../gen/ts/starforge/job/v1/telemetry_pb";
import type { LogLine } from "../../../gen/ts/starforge/job/v1/telemetry_pb";

const TAIL = 500;
const EARLIER = 500;
const MAX_DOM_LINES = 5000;
const MAX_DOM_LINES_READING_BACK = 50000;

interface Cursor {
  attempt: number;
  offset: bigint;
}

function lineElement(line: LogLine): HTMLElement {
  const stream = LogStream[line.stream]?.toLowerCase() ?? "stdout";
  return h(
    "div",
    { class: `log-line ${stream}`, "data-attempt": line.attemptNumber, "data-offset": String(line.offset) },
    line.text,
  );
}

function attemptHeader(attempt: number): HTMLElement {
  return h("div", { class: "log-attempt", "data-attempt": attempt }, `── attempt ${attempt} ──`);
}

/** The cursor of the first line in the view, null when it shows none. */
function firstShown(pre: HTMLElement): Cursor | null {
  const el = pre.querySelector<HTMLElement>(".log-line");
  if (!el?.dataset.attempt || el.dataset.offset === undefined) return null;
  return { attempt: Number(el.dataset.attempt), offset: BigInt(el.dataset.offset) };
}

export function logView(model: JobModel, signal: AbortSignal): HTMLElement {
  const pre = h("div", { id: "job-log", class: "log", "data-lines": 0, tabindex: 0 });
  const status = h("span", { id: "log-status", class: "muted" }, "connecting…");
  const earlier = h("button", { id: "log-earlier", class: "link", type: "button", hidden: true }, "load earlier");
  let lines = 0;
  let lastAttempt = 0;
  let cursor: Cursor | null = null;
  // false once a page back came short (the history starts in the view) or the first tail did
  let more = false;

  const shown = (): void => {
    pre.dataset.lines = String(lines);
    testState.logLines = lines;
    earlier.hidden = !more || firstShown(pre) === null;
  };

  const add = (batch: LogLine[]): void => {
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 24;
    const frag = document.createDocumentFragment();
    for (const line of batch) {
      if (line.attemptNumber !== lastAttempt) {
        lastAttempt = line.attemptNumber;
        frag.appendChild(attemptHeader(line.attemptNumber));
      }
      frag.appendChild(lineElement(line));
      cursor = { attempt: line.attemptNumber, offset: line.offset };
    }
    pre.appendChild(frag);
    const keep = atBottom ? MAX_DOM_LINES : MAX_DOM_LINES_READING_BACK;
    while (pre.childElementCount > keep) {
      pre.firstElementChild?.remove();
      more = true; // what was dropped can be loaded again
    }
    lines += batch.length;
    shown();
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  };

  // Puts a page of older lines on top, with the attempt header of each attempt it starts, and
  // keeps what the reader was looking at in place.
  const prepend = (batch: LogLine[]): void => {
    const frag = document.createDocumentFragment();
    let attempt = 0;
    for (const line of batch) {
      if (line.attemptNumber !== attempt) {
        attempt = line.attemptNumber;
        frag.appendChild(attemptHeader(attempt));
      }
      frag.appendChild(lineElement(line));
    }
    const top = pre.firstElementChild as HTMLElement | null;
    if (top?.classList.contains("log-attempt") && Number(top.dataset.attempt) === attempt) top.remove();
    const height = pre.scrollHeight;
    pre.insertBefore(frag, pre.firstChild);
    pre.scrollTop += pre.scrollHeight - height;
    lines += batch.length;
    shown();
  };

  const loadEarlier = async (): Promise<void> => {
    const first = firstShown(pre);
    if (!first) return;
    earlier.setAttribute("disabled", "");
    try {
      const req = {
        jobId: model.jobId,
        beforeAttemptNumber: first.attempt,
        beforeOffset: first.offset,
        tailLines: EARLIER,
      };
      const batch: LogLine[] = [];
      for await (const r of control.streamJobLogs(req, { signal })) batch.push(...r.lines);
      more = batch.length >= EARLIER;
      prepend(batch);
    } catch (err) {
      if (isAbort(err, signal)) return;
      replace(status, h("span", { class: "error" }, `could not load earlier lines (${errorLine(err)})`));
    } finally {
      earlier.removeAttribute("disabled");
    }
  };
  earlier.addEventListener("click", () => void loadEarlier());

  const follow = async (): Promise<void> => {
    testState.logLines = 0;
    while (!signal.aborted) {
      let ended = false;
      try {
        const req = cursor
          ? { jobId: model.jobId, follow: true, afterAttemptNumber: cursor.attempt, afterOffset: cursor.offset }
          : { jobId: model.jobId, follow: true, tailLines: TAIL };
        replace(status, "following");
        let first = !cursor;
        for await (const r of control.streamJobLogs(req, { signal })) {
          if (first) {
            more = r.lines.length >= TAIL; // the first message holds the whole tail
            first = false;
          }
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
    h("div", { class: "panel-head" }, h("h2", {}, "Logs"), earlier, status),
    pre,
  );
}
