// Formatting of ledger values for people: state badges, times, ages, digests.
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { h } from "./dom";
import { FailureClass, JobState, WaitReason } from "../../gen/ts/starforge/job/v1/job_state_pb";
import type { Pool } from "../../gen/ts/starforge/job/v1/job_spec_pb";

export const TERMINAL: ReadonlySet<JobState> = new Set([JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED]);

/** States a user can filter the job list by, in lifecycle order. */
export const STATES: JobState[] = [
  JobState.QUEUED,
  JobState.SUBMITTED,
  JobState.PENDING,
  JobState.RUNNING,
  JobState.SUCCEEDED,
  JobState.FAILED,
  JobState.STOPPED,
  JobState.PAUSED,
];

export function stateName(state: JobState): string {
  return JobState[state] ?? "UNKNOWN";
}

/** A colored badge; `data-state` carries the name for tests and CSS. */
export function stateBadge(state: JobState): HTMLElement {
  const name = stateName(state);
  return h("span", { class: `badge state-${name.toLowerCase()}`, "data-state": name }, name);
}

export function waitReasonName(reason: WaitReason): string {
  return reason === WaitReason.UNSPECIFIED ? "" : (WaitReason[reason] ?? "").toLowerCase().replace(/_/g, " ");
}

export function failureClassName(fc: FailureClass): string {
  return fc === FailureClass.UNSPECIFIED ? "" : (FailureClass[fc] ?? "").toLowerCase().replace(/_/g, " ");
}

export function date(ts: Timestamp | undefined): Date | null {
  return ts && (ts.seconds !== 0n || ts.nanos !== 0) ? timestampDate(ts) : null;
}

export function time(ts: Timestamp | undefined): string {
  const d = date(ts);
  return d ? d.toLocaleString() : "";
}

/** "42s", "5m", "3h", "2d": how long ago. */
export function age(ts: Timestamp | undefined, now: Date = new Date()): string {
  const d = date(ts);
  if (!d) return "";
  return duration((now.getTime() - d.getTime()) / 1000);
}

export function duration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

/** "sha256:0123456789ab…" for long digests; the full value stays in the title. */
export function digest(value: string): HTMLElement | string {
  if (!value) return "";
  const short = value.length > 20 ? `${value.slice(0, 19)}…` : value;
  return h("code", { title: value }, short);
}

export function pools(list: Pool[]): string {
  return list
    .map((p) => {
      const gpus = p.gpusPerNode > 0 ? `${p.gpusPerNode} GPU${p.gpusPerNode > 1 ? "s" : ""}` : "no GPU";
      return `${p.name}: ${p.series} × ${p.nodes} node${p.nodes === 1 ? "" : "s"} (${gpus} each)`;
    })
    .join("; ");
}
