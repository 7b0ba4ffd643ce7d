// What the job left in FORGE_OUT_DIR (checkpoints, exports, eval results): path, size, sha256,
// with a download button per file. Downloads stream over grpc-web (ControlService.
// DownloadJobArtifact, authenticated with the same bearer token as every call), are checked
// against the listed sha256 and then saved through an <a download> of a Blob. Links the job
// created are shown as links and never downloaded.
import { Code, ConnectError } from "@connectrpc/connect";
import { control, errorLine, isAbort } from "../api";
import { h, replace } from "../dom";
import { testState } from "../teststate";
import { ArtifactKind, type Artifact } from "../../../gen/ts/starforge/job/v1/artifact_pb";
import type { Job } from "../../../gen/ts/starforge/job/v1/job_pb";
import type { JobModel } from "./model";

const PAGE = 1000;

export function bytes(n: bigint | number): string {
  let value = Number(n);
  for (const unit of ["B", "kB", "MB", "GB"]) {
    if (value < 1000) return unit === "B" ? `${value} B` : `${value.toFixed(1)} ${unit}`;
    value /= 1000;
  }
  return `${value.toFixed(1)} TB`;
}

async function listAll(jobId: string, signal: AbortSignal): Promise<Artifact[]> {
  const found: Artifact[] = [];
  let pageToken = "";
  do {
    const r = await control.listJobArtifacts({ jobId, pageSize: PAGE, pageToken }, { signal });
    found.push(...r.artifacts);
    pageToken = r.nextPageToken;
  } while (pageToken);
  return found;
}

async function sha256Hex(blob: Blob): Promise<string | null> {
  if (!window.crypto?.subtle) return null; // not a secure context: nothing to check with
  const digest = await window.crypto.subtle.digest("SHA-256", await blob.arrayBuffer());
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

function save(blob: Blob, path: string): void {
  const url = URL.createObjectURL(blob);
  const a = h("a", { href: url, download: path.split("/").pop() ?? "artifact" });
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

async function download(jobId: string, a: Artifact, status: HTMLElement, signal: AbortSignal): Promise<void> {
  const parts: Uint8Array[] = [];
  let got = 0;
  for await (const chunk of control.downloadJobArtifact({ jobId, path: a.path, offset: 0n }, { signal })) {
    parts.push(chunk.data);
    got += chunk.data.length;
    replace(status, a.size > 0n ? `${Math.floor((got * 100) / Number(a.size))}%` : "…");
  }
  const blob = new Blob(parts as BlobPart[], { type: "application/octet-stream" });
  const digest = await sha256Hex(blob);
  if (digest !== null && digest !== a.sha256) {
    throw new Error("the file changed while it was downloaded (sha256 differs from the listing); try again");
  }
  save(blob, a.path);
  replace(status, "saved");
  testState.downloads += 1;
}

function row(jobId: string, a: Artifact, signal: AbortSignal): HTMLElement {
  if (a.kind === ArtifactKind.SYMLINK) {
    return h(
      "tr",
      { "data-path": a.path, "data-kind": "symlink" },
      h("td", {}, h("code", {}, a.path)),
      h("td", { class: "num muted" }, "link"),
      h("td", { class: "muted" }, `→ ${a.linkTarget}`),
      h("td", { class: "muted" }, "not downloaded"),
    );
  }
  const status = h("span", { class: "muted download-status" });
  const button = h("button", { class: "link download" }, "Download");
  button.addEventListener("click", () => {
    button.setAttribute("disabled", "");
    replace(status, "0%");
    download(jobId, a, status, signal)
      .catch((err: unknown) => {
        if (!isAbort(err, signal)) replace(status, err instanceof ConnectError ? errorLine(err) : String(err));
      })
      .finally(() => button.removeAttribute("disabled"));
  });
  return h(
    "tr",
    { "data-path": a.path, "data-kind": "file", "data-sha256": a.sha256 },
    h("td", {}, h("code", {}, a.path)),
    h("td", { class: "num" }, bytes(a.size)),
    h("td", {}, h("code", { class: "sha", title: a.sha256 }, a.sha256.slice(0, 16) + "…")),
    h("td", {}, button, " ", status),
  );
}

export function artifactsPanel(model: JobModel, signal: AbortSignal): HTMLElement {
  testState.artifacts = 0;
  const tbody = h("tbody", {});
  const note = h("p", { class: "muted", id: "artifacts-note" });
  const refresh = h("button", { class: "link", id: "artifacts-refresh" }, "Refresh");
  const el = h(
    "section",
    { class: "panel", id: "artifacts" },
    h("div", { class: "panel-head" }, h("h2", {}, "Artifacts"), refresh),
    note,
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { id: "artifacts-table", class: "grid" },
        h("thead", {}, h("tr", {}, ["Path", "Size", "SHA-256", ""].map((t) => h("th", {}, t)))),
        tbody,
      ),
    ),
  );
  let loading = false;
  const load = async (): Promise<void> => {
    if (loading) return;
    loading = true;
    try {
      const found = await listAll(model.jobId, signal);
      replace(note, found.length ? "" : "The job's out dir is empty.");
      replace(
        tbody,
        found.map((a) => row(model.jobId, a, signal)),
      );
      testState.artifacts = found.length;
    } catch (err) {
      if (isAbort(err, signal)) return;
      const code = ConnectError.from(err).code;
      replace(note, code === Code.FailedPrecondition ? errorLine(err) : `cannot list artifacts: ${errorLine(err)}`);
    } finally {
      loading = false;
    }
  };
  refresh.addEventListener("click", () => void load());
  // List once the job has run, and again whenever it ends (what it wrote last is there then).
  let shownFor = "";
  model.subscribe((job: Job) => {
    const ran = job.attempts.some((a) => a.backendHandle !== "");
    const key = `${job.attempts.length}:${model.terminal}`;
    if (ran && key !== shownFor) {
      shownFor = key;
      void load();
    } else if (!ran) {
      replace(note, "Artifacts appear once the job has run.");
    }
  });
  return el;
}
