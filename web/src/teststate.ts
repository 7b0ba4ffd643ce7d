// What the page shows, as plain numbers, for browser tests and for anyone poking at the console
// from the devtools: `window.__starforge`. The same values are also on data-* attributes
// (#job-log[data-lines], .metric-chart[data-points], #job-state[data-state]).

export interface ChartState {
  /** Points of the viewed job's own series. */
  points: number;
  /** Its last step, -1 when none. */
  lastStep: number;
  /** Its last value. */
  lastValue: number | null;
  /** Series drawn (the job plus overlaid runs). */
  series: number;
  /** The chart has been plotted (charts are plotted when they come into view). */
  drawn: boolean;
}

export interface TestState {
  user: string;
  jobId: string;
  jobState: string;
  logLines: number;
  charts: Record<string, ChartState>;
  /** Artifacts listed on the job page. */
  artifacts: number;
  /** Artifact downloads saved (sha256 checked). */
  downloads: number;
}

export const testState: TestState = {
  user: "",
  jobId: "",
  jobState: "",
  logLines: 0,
  charts: {},
  artifacts: 0,
  downloads: 0,
};

declare global {
  interface Window {
    __starforge: TestState;
  }
}

window.__starforge = testState;
