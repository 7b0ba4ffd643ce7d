// Attempts (one row per launch on a backend) and provenance (what exactly ran).
import { facts, h, replace } from "../dom";
import { digest, failureClassName, stateBadge, time } from "../format";
import { AttemptCause } from "../../../gen/ts/starforge/job/v1/job_pb";
import type { Job } from "../../../gen/ts/starforge/job/v1/job_pb";

function cause(c: AttemptCause): string {
  return c === AttemptCause.UNSPECIFIED ? "" : (AttemptCause[c] ?? "").toLowerCase().replace(/_/g, " ");
}

export function attemptsTable(): { el: HTMLElement; update: (job: Job) => void } {
  const tbody = h("tbody", {});
  const el = h(
    "section",
    { class: "panel" },
    h("h2", {}, "Attempts"),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { id: "attempts-table", class: "grid" },
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ["#", "State", "Cause", "Fleet", "Node", "Handle", "Started", "Ended", "Exit", "Reason"].map((t) =>
              h("th", {}, t),
            ),
          ),
        ),
        tbody,
      ),
    ),
  );
  const update = (job: Job): void => {
    replace(
      tbody,
      job.attempts.length
        ? [...job.attempts].reverse().map((a) =>
            h(
              "tr",
              { "data-attempt": a.number },
              h("td", { class: "num" }, String(a.number)),
              h("td", {}, stateBadge(a.state)),
              h("td", {}, cause(a.cause)),
              h("td", {}, a.fleet, a.executorKind ? h("span", { class: "muted" }, ` (${a.executorKind})`) : null),
              h("td", {}, a.node),
              h("td", {}, a.backendHandle ? h("code", {}, a.backendHandle) : ""),
              h("td", {}, time(a.startTime) || time(a.createTime)),
              h("td", {}, time(a.endTime)),
              h("td", { class: "num" }, a.exitCode !== undefined ? String(a.exitCode) : ""),
              h("td", {}, [a.reason, failureClassName(a.failureClass)].filter(Boolean).join(" · ")),
            ),
          )
        : h("tr", {}, h("td", { colspan: 10, class: "muted empty" }, "Not launched yet.")),
    );
  };
  return { el, update };
}

function jsonPretty(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

export function provenance(): { el: HTMLElement; update: (job: Job) => void } {
  const body = h("div", {});
  const el = h("section", { class: "panel", id: "provenance" }, h("h2", {}, "Provenance"), body);
  let shown = "";
  const update = (job: Job): void => {
    const p = job.provenance;
    const key = JSON.stringify([p?.capsuleDigest, p?.imageDigest, p?.runnerDigest, job.resolvedConfigJson]);
    if (key === shown) return; // keep <details> open across live updates
    shown = key;
    if (!p) {
      replace(body, h("p", { class: "muted" }, "No provenance recorded."));
      return;
    }
    replace(
      body,
      facts([
        [
          "Git commit",
          p.gitCommit
            ? [
                digest(p.gitCommit),
                p.gitBranch ? ` on ${p.gitBranch}` : "",
                p.gitDirty ? h("span", { class: "badge dirty" }, "dirty") : "",
              ]
            : "",
        ],
        ["Untracked files", p.untrackedFiles.length ? p.untrackedFiles.join(", ") : ""],
        ["Recipe digest", digest(p.recipeDigest)],
        ["Runner digest", digest(p.runnerDigest)],
        ["Capsule digest", digest(p.capsuleDigest)],
        ["Image digest", digest(p.imageDigest)],
        ["Submitted with", [p.clientVersion ? `sf ${p.clientVersion}` : "", p.clientHost ? ` from ${p.clientHost}` : ""]],
      ]),
      p.configSnapshot
        ? h("details", {}, h("summary", {}, "config.yaml as submitted"), h("pre", {}, p.configSnapshot))
        : null,
      job.resolvedConfigJson
        ? h("details", {}, h("summary", {}, "Resolved config"), h("pre", {}, jsonPretty(job.resolvedConfigJson)))
        : null,
    );
  };
  return { el, update };
}
