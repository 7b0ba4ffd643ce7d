// The method catalog: every published recipe, and one recipe's parameters, runtimes and metrics.
import { catalog, errorLine, isAbort } from "../api";
import { facts, h, replace } from "../dom";
import { digest } from "../format";
import { href } from "../router";
import { ParameterType, type Recipe } from "../../../gen/ts/starforge/catalog/v1/recipe_pb";

function typeName(t: ParameterType): string {
  return (ParameterType[t] ?? "").toLowerCase().replace(/_/g, " ");
}

function range(p: Recipe["parameters"][number]): string {
  if (p.choices.length) return p.choices.join(" | ");
  if (p.min !== undefined && p.max !== undefined) return `${p.min} … ${p.max}`;
  if (p.min !== undefined) return `≥ ${p.min}`;
  if (p.max !== undefined) return `≤ ${p.max}`;
  return "";
}

function recipeView(r: Recipe): HTMLElement {
  return h(
    "div",
    { class: "recipe", "data-recipe": r.name },
    h("h1", {}, r.name, h("span", { class: "muted" }, ` ${r.version}`)),
    r.description ? h("p", {}, r.description) : null,
    facts([
      ["Framework", r.framework],
      ["Adapter", r.adapter],
      ["Entrypoint", r.entrypoint ? h("code", {}, r.entrypoint) : ""],
      ["Digest", digest(r.digest)],
      ["Default profile", r.defaultProfile],
      ["Pools", r.poolNames.join(", ")],
      ["Needs", [r.requiresModel ? "a model" : "", r.requiresTrainData ? "training data" : ""].filter(Boolean).join(", ")],
      ["Stages", r.stages.join(", ")],
      ["Metrics", r.metrics.join(", ")],
      ["Artifacts", r.artifacts.join(", ")],
      ["Observability", r.defaultObservability],
    ]),
    h("h2", {}, "Parameters"),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "grid", id: "parameters-table" },
        h("thead", {}, h("tr", {}, ["Key", "Type", "Default", "Allowed", "Description"].map((t) => h("th", {}, t)))),
        h(
          "tbody",
          {},
          r.parameters.length
            ? r.parameters.map((p) =>
                h(
                  "tr",
                  {},
                  h("td", {}, h("code", {}, p.key), p.required ? h("span", { class: "badge required" }, "required") : null),
                  h("td", {}, typeName(p.type)),
                  h("td", {}, p.defaultJson ? h("code", {}, p.defaultJson) : ""),
                  h("td", {}, range(p)),
                  h("td", {}, p.doc),
                ),
              )
            : h("tr", {}, h("td", { colspan: 5, class: "muted empty" }, "No parameters.")),
        ),
      ),
    ),
    r.runtimes.length ? h("h2", {}, "Runtimes") : null,
    r.runtimes.length
      ? h(
          "div",
          { class: "table-wrap" },
          h(
            "table",
            { class: "grid" },
            h("thead", {}, h("tr", {}, ["Framework version", "Image", "Python", "Capabilities"].map((t) => h("th", {}, t)))),
            h(
              "tbody",
              {},
              r.runtimes.map((rt) =>
                h(
                  "tr",
                  {},
                  h("td", {}, rt.frameworkVersion, rt.default ? h("span", { class: "badge" }, "default") : null),
                  h("td", {}, h("code", {}, rt.image)),
                  h("td", {}, rt.python),
                  h("td", {}, rt.capabilities.join(", ")),
                ),
              ),
            ),
          ),
        )
      : null,
  );
}

export function catalogPage(name: string, signal: AbortSignal): HTMLElement {
  const error = h("p", { id: "catalog-error", class: "error", role: "alert" });
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  void (async () => {
    try {
      if (name) {
        const r = await catalog.getRecipe({ name }, { signal });
        replace(body, r.recipe ? recipeView(r.recipe) : h("p", {}, "Not found."));
        return;
      }
      const r = await catalog.listRecipes({}, { signal });
      replace(
        body,
        h("h1", {}, "Catalog"),
        h("p", { class: "muted" }, `Catalog ${r.catalogVersion} · `, digest(r.catalogDigest)),
        h(
          "div",
          { class: "table-wrap" },
          h(
            "table",
            { class: "grid", id: "recipes-table" },
            h("thead", {}, h("tr", {}, ["Method", "Version", "Summary", "Digest"].map((t) => h("th", {}, t)))),
            h(
              "tbody",
              {},
              r.recipes.map((rs) =>
                h(
                  "tr",
                  { "data-recipe": rs.name },
                  h("td", {}, h("a", { href: href(["catalog", ...rs.name.split("/")]) }, rs.name)),
                  h("td", {}, rs.version),
                  h("td", {}, rs.summary),
                  h("td", {}, digest(rs.digest)),
                ),
              ),
            ),
          ),
        ),
      );
    } catch (err) {
      if (!isAbort(err, signal)) {
        replace(body);
        replace(error, errorLine(err));
      }
    }
  })();
  return h(
    "section",
    { class: "page catalog" },
    name ? h("a", { class: "back", href: href(["catalog"]) }, "← Catalog") : null,
    error,
    body,
  );
}
