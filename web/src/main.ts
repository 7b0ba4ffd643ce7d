// The console's shell: a top bar, the signed-in check, and one page at a time. Leaving a page
// aborts its streams and polls (each page gets an AbortSignal).
import "uplot/dist/uPlot.min.css";
import "./styles.css";
import { errorLine, handleUnauthenticated } from "./api";
import { h, replace } from "./dom";
import { catalogPage } from "./pages/catalog";
import { jobPage } from "./job/page";
import { jobsPage } from "./pages/jobs";
import { signInPage } from "./pages/signin";
import { currentRoute, go, href } from "./router";
import { restore, session, signOut, type Session } from "./session";
import { testState } from "./teststate";

const root = document.getElementById("app") as HTMLElement;
let pageAbort = new AbortController();
let signInMessage = "";

function topBar(s: Session): HTMLElement {
  const route = currentRoute().path[0] ?? "jobs";
  const link = (name: string, label: string) =>
    h("a", { href: href([name]), class: route === name ? "active" : "" }, label);
  return h(
    "header",
    { class: "topbar" },
    h("a", { class: "brand", href: href(["jobs"]) }, "StarForge"),
    h("nav", {}, link("jobs", "Jobs"), link("catalog", "Catalog")),
    h(
      "div",
      { class: "who" },
      h("span", { id: "current-user", "data-user": s.user }, s.user),
      s.admin ? h("span", { class: "badge admin" }, "admin") : null,
      h("button", { class: "link", id: "sign-out", onclick: () => doSignOut("") }, "Sign out"),
    ),
  );
}

function doSignOut(message: string): void {
  signOut();
  signInMessage = message;
  testState.user = "";
  go(["signin"]);
  void render();
}

function page(s: Session, signal: AbortSignal): HTMLElement {
  const { path, query } = currentRoute();
  const [section = "jobs", ...rest] = path;
  if (section === "jobs" && rest.length > 0) return jobPage(rest.join("/"), s, signal);
  if (section === "catalog") return catalogPage(rest.join("/"), signal);
  return jobsPage(query, s, signal);
}

async function render(): Promise<void> {
  pageAbort.abort();
  pageAbort = new AbortController();
  const signal = pageAbort.signal;
  let s = session();
  if (!s) {
    try {
      s = await restore();
    } catch (err) {
      const none = err instanceof Error && err.message === "not signed in";
      signInMessage = signInMessage || (none ? "" : errorLine(err));
    }
    if (signal.aborted) return;
  }
  if (!s) {
    replace(
      root,
      signInPage(signInMessage, () => {
        signInMessage = "";
        if (currentRoute().path[0] === "signin") go(["jobs"]);
        else void render();
      }),
    );
    return;
  }
  if (currentRoute().path[0] === "signin") {
    go(["jobs"]);
    return;
  }
  testState.user = s.user;
  replace(
    root,
    topBar(s),
    h("main", {}, page(s, signal)),
    h("footer", {}, `StarForge ${s.version} · signed in as ${s.user}`),
  );
}

handleUnauthenticated((message) => {
  if (session()) doSignOut(message);
});
window.addEventListener("hashchange", () => void render());
void render();
