// Hash routes (#/jobs, #/jobs/<id>, #/catalog, #/catalog/<name>, #/signin), so the control plane's
// static file server needs no fallback for deep links.

export interface Route {
  path: string[];
  query: URLSearchParams;
}

export function currentRoute(): Route {
  const raw = window.location.hash.replace(/^#\/?/, "");
  const [path = "", query = ""] = raw.split("?", 2);
  return { path: path.split("/").filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(query) };
}

export function href(path: string[], query?: Record<string, string>): string {
  const q = new URLSearchParams(Object.entries(query ?? {}).filter(([, v]) => v !== "")).toString();
  return `#/${path.map(encodeURIComponent).join("/")}${q ? `?${q}` : ""}`;
}

export function go(path: string[], query?: Record<string, string>): void {
  window.location.hash = href(path, query);
}

/** Updates the query of the current route without re-rendering the page. */
export function setQuery(query: Record<string, string>): void {
  const url = href(currentRoute().path, query);
  window.history.replaceState(null, "", url);
}
