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
}
