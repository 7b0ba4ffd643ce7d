// The console's one connection to the control plane: gRPC-web through envoy on this page's own
// origin (envoy routes /starforge.* to the control plane's gRPC port), with the personal access
// token as bearer metadata on every call.
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import { CatalogService } from "../../gen/ts/starforge/catalog/v1/catalog_service_pb";
import { AccountService } from "../../gen/ts/starforge/control/v1/account_service_pb";
import { ControlService } from "../../gen/ts/starforge/control/v1/control_service_pb";

const TOKEN_KEY = "starforge.token";

export const tokens = {
  get(): string | null {
    return window.localStorage.getItem(TOKEN_KEY);
  },
  set(token: string): void {
    window.localStorage.setItem(TOKEN_KEY, token);
  },
  clear(): void {
    window.localStorage.removeItem(TOKEN_KEY);
  },
};

let onUnauthenticated: (message: string) => void = () => {};

/** Called when the server refuses the stored token (revoked, expired): the app signs out. */
export function handleUnauthenticated(handler: (message: string) => void): void {
  onUnauthenticated = handler;
}

const bearer: Interceptor = (next) => async (req) => {
  const token = tokens.get();
  if (token) req.header.set("authorization", `Bearer ${token}`);
  try {
    return await next(req);
  } catch (err) {
    const e = ConnectError.from(err);
    if (e.code === Code.Unauthenticated && token) onUnauthenticated(errorLine(e));
    throw err;
  }
};

const transport = createGrpcWebTransport({
  baseUrl: window.location.origin,
  interceptors: [bearer],
});

export const control: Client<typeof ControlService> = createClient(ControlService, transport);
export const catalog: Client<typeof CatalogService> = createClient(CatalogService, transport);
export const account: Client<typeof AccountService> = createClient(AccountService, transport);

/** One readable line for an error: the server's grpc-message is already the sentence to show. */
export function errorLine(err: unknown): string {
  const e = ConnectError.from(err);
  return e.rawMessage || `${Code[e.code] ?? "error"} (no message from the server)`;
}

/** True for errors caused by our own AbortController (leaving a page), which are not failures. */
export function isAbort(err: unknown, signal?: AbortSignal): boolean {
  return signal?.aborted === true || ConnectError.from(err).code === Code.Canceled;
}
