// One metric chart (uPlot): several runs as series over the step axis. Drag to zoom into a step
// range, double-click to zoom out; live updates keep the zoom while one is set. The plot is built
// only once the chart comes near the viewport (a page of many metrics draws what is seen first).
import uPlot from "uplot";
import { h } from "../dom";

export interface Run {
  label: string;
  steps: number[];
  values: number[];
}

const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];
const HEIGHT = 240;

export class MetricChart {
  readonly el: HTMLElement;
  private readonly canvas: HTMLElement;
  private plot: uPlot | null = null;
  private shape = "";
  private zoomed = false;
  private readonly resize: ResizeObserver;
  private readonly seen: IntersectionObserver;
  private visible = false;
  private pending: Run[] | null = null;
  /** Called after each draw (the plot is built or its data replaced). */
  onDraw: () => void = () => {};
  /** Called when a step range is selected (zoom in), with its bounds. */
  onZoom: (lo: number, hi: number) => void = () => {};

  constructor(readonly metric: string) {
    this.canvas = h("div", { class: "chart-canvas" });
    this.el = h(
      "figure",
      { class: "metric-chart", "data-metric": metric, "data-points": 0, "data-series": 0, "data-zoomed": 0 },
      h("figcaption", {}, metric),
      this.canvas,
    );
    this.resize = new ResizeObserver(() => this.plot?.setSize({ width: this.width(), height: HEIGHT }));
    this.resize.observe(this.canvas);
    this.seen = new IntersectionObserver(
      (entries) => {
        this.visible = entries.some((e) => e.isIntersecting);
        if (this.visible && this.pending) {
          const runs = this.pending;
          this.pending = null;
          this.draw(runs);
        }
      },
      { rootMargin: "300px" },
    );
    this.seen.observe(this.el);
  }

  private width(): number {
    return Math.max(this.canvas.clientWidth, 280);
  }

  /** Draws the runs; the first is the job itself (its point count goes on data-points). */
  update(runs: Run[]): void {
    const own = runs[0];
    this.el.dataset.points = String(own?.steps.length ?? 0);
    this.el.dataset.series = String(runs.length);
    this.el.dataset.lastStep = String(own?.steps.at(-1) ?? -1);
    if (!this.visible) {
      this.pending = runs; // drawn when it scrolls into view
      return;
    }
    this.draw(runs);
  }

  private draw(runs: Run[]): void {
    this.el.dataset.drawn = "1";
    const data = uPlot.join(runs.map((r) => [r.steps, r.values] as uPlot.AlignedData));
    const shape = runs.map((r) => r.label).join("\n");
    if (this.plot && shape === this.shape) {
      this.plot.setData(data, !this.zoomed);
      this.onDraw();
      return;
    }
    this.plot?.destroy();
    this.shape = shape;
    this.setZoomed(false);
    this.plot = new uPlot(this.options(runs), data, this.canvas);
    this.plot.over.addEventListener("dblclick", () => this.setZoomed(false));
    this.onDraw();
  }

  /** data-zoomed says whether a step range is selected (live updates then keep it). */
  private setZoomed(zoomed: boolean): void {
    this.zoomed = zoomed;
    this.el.dataset.zoomed = zoomed ? "1" : "0";
  }

  private options(runs: Run[]): uPlot.Options {
    return {
      width: this.width(),
      height: HEIGHT,
      scales: { x: { time: false } },
      axes: [{ label: "step" }, { size: 60 }],
      cursor: { drag: { x: true, y: false, setScale: true } },
      legend: { live: true },
      series: [
        { label: "step" },
        ...runs.map((r, i) => ({
          label: r.label,
          stroke: COLORS[i % COLORS.length],
          width: i === 0 ? 2 : 1.5,
          spanGaps: true,
          points: { show: r.steps.length < 60 },
        })),
      ],
      hooks: {
        setScale: [
          (u: uPlot, key: string) => {
            if (key !== "x") return;
            this.el.dataset.xMin = String(u.scales.x?.min ?? "");
            this.el.dataset.xMax = String(u.scales.x?.max ?? "");
          },
        ],
        setSelect: [
          (u: uPlot) => {
            if (u.select.width <= 0) return;
            this.setZoomed(true);
            const lo = u.posToVal(u.select.left, "x");
            const hi = u.posToVal(u.select.left + u.select.width, "x");
            if (Number.isFinite(lo) && Number.isFinite(hi)) this.onZoom(lo, hi);
          },
        ],
      },
    };
  }

  destroy(): void {
    this.resize.disconnect();
    this.seen.disconnect();
    this.plot?.destroy();
  }
}
