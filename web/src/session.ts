// Who is signed in: checked with AccountService.WhoAmI, plus the server's version and whether the
// user is an admin (which decides what the job list and the job buttons offer).
import { account, control, tokens } from "./api";

export interface Session {
  user: string;
  admin: boolean;
  version: string;
}

let current: Session | null = null;

export function session(): Session | null {
  return current;
}

/** Checks a token and keeps it (localStorage) when the server accepts it; throws the refusal. */
export async function signIn(token: string): Promise<Session> {
  const previous = tokens.get();
  tokens.set(token.trim());
  try {
    return await restore();
  } catch (err) {
    if (previous) tokens.set(previous);
    else tokens.clear();
    throw err;
  }
}

/** Re-checks the stored token (page load). Throws when there is none or it is refused. */
export async function restore(): Promise<Session> {
  if (!tokens.get()) throw new Error("not signed in");
  const who = await account.whoAmI({});
  const info = await control.getServerInfo({});
  current = { user: who.user?.name ?? info.user, admin: who.user?.admin ?? info.admin, version: info.version };
  return current;
}

export function signOut(): void {
  tokens.clear();
  current = null;
}
