// Stop / Pause / Resume / Retry: enabled only when the state allows it and the user owns the job
// or is an admin. The server still decides; its refusal is shown as one line.
import { control, errorLine } from "../api";
import { h, replace } from "../dom";
import { stateName } from "../format";
import type { Session } from "../session";
import type { JobModel } from "./model";
import { JobState } from "../../../gen/ts/starforge/job/v1/job_state_pb";
import type { Job } from "../../../gen/ts/starforge/job/v1/job_pb";

interface Action {
  id: string;
  label: string;
  verb: string;
  states: JobState[];
  /** Ask a second click ("Confirm stop") before doing it. */
  confirm: boolean;
  call: (jobId: string) => Promise<Job | undefined>;
}

/** How long a first click on Stop waits for the second. */
const CONFIRM_MS = 8000;

const ACTIONS: Action[] = [
  {
    id: "stop",
    label: "Stop",
    verb: "stopped",
    states: [JobState.QUEUED, JobState.SUBMITTED, JobState.PENDING, JobState.RUNNING],
    confirm: true,
    call: async (jobId) => (await control.stopJob({ jobId, reason: "stopped from the web console" })).job,
  },
  {
    id: "pause",
    label: "Pause",
    verb: "paused",
    states: [JobState.RUNNING],
    confirm: false,
    call: async (jobId) => (await control.pauseJob({ jobId, reason: "paused from the web console" })).job,
  },
  {
    id: "resume",
    label: "Resume",
    verb: "resumed",
    states: [JobState.PAUSED, JobState.STOPPED],
    confirm: false,
    call: async (jobId) => (await control.resumeJob({ jobId })).job,
  },
  {
    id: "retry",
    label: "Retry",
    verb: "retried",
    states: [JobState.FAILED],
    confirm: false,
    call: async (jobId) => (await control.retryJob({ jobId })).job,
  },
];

/** Why the action is not offered, or "" when it is. */
export function refusal(action: Action, job: Job, s: Session): string {
  if (!s.admin && s.user !== job.owner) return `only ${job.owner} or an admin can change this job`;
  if (!action.states.includes(job.state)) return `a ${stateName(job.state)} job cannot be ${action.verb}`;
  return "";
}

export function actionBar(model: JobModel, s: Session): HTMLElement {
  const error = h("p", { id: "action-error", class: "error", role: "alert" });
  const buttons = new Map<string, HTMLButtonElement>();
  let armed: string | null = null;
  let busy = false;

  const refresh = (): void => {
    const job = model.job;
    if (!job) return;
    for (const a of ACTIONS) {
      const b = buttons.get(a.id)!;
      const why = refusal(a, job, s);
      b.disabled = busy || why !== "";
      b.title = why;
      b.textContent = armed === a.id ? `Confirm ${a.label.toLowerCase()}` : a.label;
      b.classList.toggle("armed", armed === a.id);
    }
  };

  const run = async (a: Action): Promise<void> => {
    if (a.confirm && armed !== a.id) {
      armed = a.id;
      refresh();
      setTimeout(() => {
        if (armed === a.id) {
          armed = null;
          refresh();
        }
      }, CONFIRM_MS);
      return;
    }
    armed = null;
    busy = true;
    replace(error);
    refresh();
    try {
      const job = await a.call(model.jobId);
      if (job) model.set(job);
    } catch (err) {
      replace(error, errorLine(err));
    } finally {
      busy = false;
      refresh();
    }
  };

  for (const a of ACTIONS) {
    buttons.set(
      a.id,
      h("button", { id: `action-${a.id}`, class: a.id === "stop" ? "danger" : "", onclick: () => void run(a) }, a.label),
    );
  }
  model.subscribe(refresh);
  return h("div", { class: "actions" }, h("div", { class: "buttons" }, [...buttons.values()]), error);
}
