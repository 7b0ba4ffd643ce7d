// The job a page shows, kept current by ControlService.WatchJob (reconnecting after a drop with
// after_sequence) and by the responses of the buttons. Followers (logs, metrics) wait on it.
import { Code, ConnectError } from "@connectrpc/connect";
import { control, errorLine, isAbort } from "../api";
import { sleep } from "../dom";
import { TERMINAL } from "../format";
import type { Job } from "../../../gen/ts/starforge/job/v1/job_pb";

type Listener = (job: Job) => void;

export class JobModel {
  job: Job | null = null;
  private listeners: Listener[] = [];
  private waiters: (() => void)[] = [];

  constructor(readonly jobId: string) {}

  subscribe(fn: Listener): void {
    this.listeners.push(fn);
    if (this.job) fn(this.job);
  }

  set(job: Job): void {
    this.job = job;
    for (const fn of this.listeners) fn(job);
    if (!this.terminal) {
      const waiters = this.waiters;
      this.waiters = [];
      for (const w of waiters) w();
    }
  }

  get terminal(): boolean {
    return this.job !== null && TERMINAL.has(this.job.state);
  }

  /** Resolves when the job is (again) not terminal, e.g. after Resume or Retry, or on abort. */
  untilActive(signal: AbortSignal): Promise<void> {
    if (!this.terminal || signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      this.waiters.push(resolve);
      signal.addEventListener("abort", () => resolve());
    });
  }

  /** GetJob, then WatchJob for as long as the page is open; both again after a dropped stream. */
  async run(signal: AbortSignal, onError: (message: string) => void): Promise<void> {
    let after = 0n;
    while (!signal.aborted) {
      try {
        this.set((await control.getJob({ jobId: this.jobId }, { signal })).job!);
        onError("");
        for await (const r of control.watchJob({ jobId: this.jobId, afterSequence: after }, { signal })) {
          if (r.event && r.event.sequence > after) after = r.event.sequence;
          if (r.job) this.set(r.job);
        }
      } catch (err) {
        if (isAbort(err, signal)) return;
        const code = ConnectError.from(err).code;
        if (this.job === null && (code === Code.NotFound || code === Code.PermissionDenied)) {
          onError(errorLine(err)); // a wrong id: nothing to wait for
          return;
        }
        onError(`live updates interrupted (${errorLine(err)}); reconnecting…`);
        await sleep(2000, signal);
        continue;
      }
      if (this.terminal) await this.untilActive(signal);
      else await sleep(1000, signal);
    }
  }
}
