"""Files that must never travel in a job package: the one rule set, used by `sf` and by admission.

`sf` refuses a lab that would ship any of these, and the control plane refuses them again at
admission (the server never trusts the client; secrets stay server-side). The
rules are deliberately name-based and cheap; two files (.npmrc, .pypirc) are only sensitive when
they hold credentials, so their content is checked. Templates meant to be committed
(`.env.example`, `.env.sample`, `.env.template`, `.env.dist`) are allowed.
"""

from __future__ import annotations

import fnmatch
import pathlib
import re
from collections.abc import Callable

from common.relpath import relative_path_problem

# (glob on the file name, why it is refused)
NAME_RULES: tuple[tuple[str, str], ...] = (
    (".env", "environment file, usually holds secrets"),
    (".env.*", "environment file, usually holds secrets"),
    ("*.pem", "PEM key or certificate"),
    ("*.key", "private key"),
    ("*.p12", "PKCS#12 key store"),
    ("*.pfx", "PKCS#12 key store"),
    ("*.jks", "Java key store"),
    ("*.keystore", "key store"),
    ("*.kdbx", "KeePass database"),
    ("id_rsa*", "SSH key"),
    ("id_dsa*", "SSH key"),
    ("id_ecdsa*", "SSH key"),
    ("id_ed25519*", "SSH key"),
    ("credentials", "cloud credentials file"),
    ("credentials.json", "credentials file"),
    ("client_secret*.json", "OAuth client secret"),
    (".netrc", "netrc credentials"),
    ("_netrc", "netrc credentials"),
    (".git-credentials", "git credentials"),
    (".pgpass", "PostgreSQL password file"),
    (".htpasswd", "password file"),
)
# path suffixes (folder + name) that are credentials wherever they sit
PATH_RULES: tuple[tuple[str, str], ...] = (
    (".docker/config.json", "docker registry credentials"),
    (".kube/config", "Kubernetes credentials"),
    (".ssh/*", "SSH configuration or key"),
)
ENV_TEMPLATES = {".env.example", ".env.sample", ".env.template", ".env.dist"}
CONTENT_RULES: dict[str, tuple[re.Pattern[bytes], str]] = {
    # [ \t]* and not \s*: `^\s*` can run across newlines from every line start, quadratic work
    # on a file of blank lines (the server checks uploaded files, written by anyone).
    ".npmrc": (re.compile(rb"(_authToken|_auth|_password)[ \t]*="), "npm config with a registry token"),
    ".pypirc": (re.compile(rb"(?m)^[ \t]*password[ \t]*[:=]"), "PyPI config with a password"),
}
# The content rules read at most this much of a file (the CLI from disk, admission from a blob).
CONTENT_LIMIT = 1 << 20


def _any_of(globs: list[str]) -> re.Pattern[str]:
    """One regex that matches what any of `globs` matches (fnmatchcase semantics)."""
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in globs))


# Every file of a workspace is checked, on both sides (10,000 files: 270,000 fnmatch calls when
# each rule was tried in turn). One regex says whether any rule matches; the rule that did is
# looked up only then.
_ANY_NAME = _any_of([glob for glob, _ in NAME_RULES])
_ANY_PATH = _any_of([g for suffix, _ in PATH_RULES for g in (suffix, "*/" + suffix)])


def why_sensitive(
    rel_path: str, real_path: str | pathlib.Path | None = None, read: Callable[[], bytes] | None = None
) -> str | None:
    """Why `rel_path` may not be packed, or None when it may. Reads .npmrc/.pypirc only: from
    `real_path` (the CLI) or through `read` (the server, from its blob store)."""
    name = rel_path.rsplit("/", 1)[-1]
    if name in ENV_TEMPLATES:
        return None
    if _ANY_NAME.match(name):
        for glob, why in NAME_RULES:
            if fnmatch.fnmatchcase(name, glob):
                return why
    if _ANY_PATH.match(rel_path):
        for suffix, why in PATH_RULES:
            if fnmatch.fnmatchcase(rel_path, suffix) or fnmatch.fnmatchcase(rel_path, "*/" + suffix):
                return why
    if name in CONTENT_RULES and (real_path is not None or read is not None):
        regex, why = CONTENT_RULES[name]
        try:
            if read is not None:
                content = read()[:CONTENT_LIMIT]
            else:
                assert real_path is not None
                with open(real_path, "rb") as f:
                    content = f.read(CONTENT_LIMIT)
        except OSError:
            return None
        if regex.search(content):
            return why
    return None


def all_rules() -> list[str]:
    """Every rule, for docs and messages."""
    rules = [glob for glob, _ in NAME_RULES] + [p for p, _ in PATH_RULES]
    return [*rules, ".npmrc (with a token)", ".pypirc (with a password)"]


def bad_path(path: str) -> str | None:
    """Why a workspace path is unsafe (the rule of common/relpath.py, and at most 1024 characters), or None."""
    problem = relative_path_problem(path)
    if problem:
        return problem
    if len(path) > 1024:
        return "is longer than 1024 characters"
    return None
