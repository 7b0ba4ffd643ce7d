// Sign in with a personal access token (`sf token create`, or the admin-token file of `sf up`).
import { errorLine } from "../api";
import { h, replace } from "../dom";
import { signIn } from "../session";

export function signInPage(message: string, onSignedIn: () => void): HTMLElement {
  const input = h("input", {
    id: "token",
    type: "password",
    name: "token",
    autocomplete: "current-password",
    placeholder: "sfp_…",
    required: true,
  });
  const error = h("p", { id: "signin-error", class: "error", role: "alert" }, message);
  const button = h("button", { type: "submit", id: "sign-in", class: "primary" }, "Sign in");
  const form = h(
    "form",
    { class: "card signin" },
    h("h1", {}, "StarForge"),
    h("p", { class: "muted" }, "Sign in with a personal access token (", h("code", {}, "sf token create"), ")."),
    h("label", { for: "token" }, "Personal access token"),
    input,
    button,
    error,
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    button.disabled = true;
    replace(error);
    signIn(input.value)
      .then(onSignedIn)
      .catch((err: unknown) => {
        replace(error, errorLine(err));
        button.disabled = false;
        input.select();
      });
  });
  queueMicrotask(() => input.focus());
  return h("div", { class: "center" }, form);
}
