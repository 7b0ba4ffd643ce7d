// A run's metric series, fetched incrementally with GetJobMetrics(after_step): each poll asks for
// the points after the lowest last step of any series, and drops the ones already held. Each
// fetch asks for at most MAX_POINTS points per series, which the control plane picks so the
// chart keeps its shape (first, last, and each bucket's lowest and highest value).
import { control } from "../api";

export const MAX_POINTS = 1000;

export interface Series {
  steps: number[];
  values: number[];
}

export class RunMetrics {
  readonly series = new Map<string, Series>();

  constructor(readonly jobId: string) {}

  private afterStep(): bigint {
    let low: number | null = null;
    for (const s of this.series.values()) {
      const last = s.steps.at(-1) ?? -1;
      low = low === null ? last : Math.min(low, last);
    }
    return low === null || low < 0 ? 0n : BigInt(low);
  }

  /** Fetches new points; true when anything changed. */
  async poll(signal: AbortSignal): Promise<boolean> {
    const r = await control.getJobMetrics({ jobId: this.jobId, afterStep: this.afterStep(), maxPoints: MAX_POINTS }, { signal });
    let changed = false;
    for (const s of r.series) {
      let mine = this.series.get(s.name);
      if (!mine) {
        mine = { steps: [], values: [] };
        this.series.set(s.name, mine);
      }
      for (const p of s.points) {
        const step = Number(p.step);
        const last = mine.steps.at(-1);
        if (last === undefined || step > last) {
          mine.steps.push(step);
          mine.values.push(p.value);
          changed = true;
        } else if (step === last && mine.values.at(-1) !== p.value) {
          mine.values[mine.values.length - 1] = p.value; // a re-reported step (resume): keep the latest
          changed = true;
        }
      }
    }
    return changed;
  }

  /** Fetches the steps lo..hi of one series at full resolution (at most MAX_POINTS of them) and
   * puts them in place of the points held there (a zoomed chart); true when anything changed. */
  async refine(name: string, lo: number, hi: number, signal: AbortSignal): Promise<boolean> {
    const mine = this.series.get(name);
    if (!mine || hi < lo) return false;
    const after = Math.max(0, Math.floor(lo) - 1);
    const upTo = Math.ceil(hi);
    if (upTo <= 0) return false;
    const r = await control.getJobMetrics(
      { jobId: this.jobId, names: [name], afterStep: BigInt(after), upToStep: BigInt(upTo), maxPoints: MAX_POINTS },
      { signal },
    );
    const got = r.series.find((s) => s.name === name);
    if (!got || !got.points.length) return false;
    const inRange = (step: number): boolean => (after === 0 || step > after) && step <= upTo;
    const steps: number[] = [];
    const values: number[] = [];
    let i = 0;
    while (i < mine.steps.length && !inRange(mine.steps[i]!) && mine.steps[i]! <= upTo) {
      steps.push(mine.steps[i]!);
      values.push(mine.values[i]!);
      i++;
    }
    for (const p of got.points) {
      steps.push(Number(p.step));
      values.push(p.value);
    }
    for (; i < mine.steps.length; i++) {
      if (mine.steps[i]! > upTo) {
        steps.push(mine.steps[i]!);
        values.push(mine.values[i]!);
      }
    }
    mine.steps = steps;
    mine.values = values;
    return true;
  }
}
