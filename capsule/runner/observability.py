"""External observability: which tracker a URL is for, and the variables a job gets for it.

Standard library only: the control plane uses it at admission (to resolve and record the tool) and
the runner in the job (to set the variables), so the two cannot disagree.
"""

from __future__ import annotations

import urllib.parse

# The variable every external-mode job gets, whatever the tool.
URL_VARIABLE = "STARFORGE_OBSERVABILITY_URL"
TOOL_VARIABLE = "STARFORGE_OBSERVABILITY_TOOL"
# Each tool's own variable for "where is the server".
TOOL_VARIABLES = {"wandb": "WANDB_BASE_URL", "mlflow": "MLFLOW_TRACKING_URI"}
MAX_URL_CHARS = 2048


def url_problem(url: str) -> str:
    """Why `url` cannot be a tracker URL ("" when it can): http(s), a host, no spaces, bounded."""
    if len(url) > MAX_URL_CHARS:
        return f"is longer than {MAX_URL_CHARS} characters"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return "has spaces or control characters"
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host"
    return ""


def tool_for(url: str, explicit: str = "") -> str:
    """The tracker: `explicit` when given, else the first of TOOL_VARIABLES whose name is in the
    URL's host or path (https://api.wandb.ai, http://mlflow.internal:5000); "" when none is."""
    if explicit:
        return explicit
    parts = urllib.parse.urlsplit(url)
    where = f"{parts.hostname or ''}{parts.path}".lower()
    return next((tool for tool in TOOL_VARIABLES if tool in where), "")


def job_variables(url: str, tool: str) -> dict[str, str]:
    """What the training command gets in external mode."""
    if not url:
        return {}
    env = {URL_VARIABLE: url, TOOL_VARIABLE: tool}
    if tool in TOOL_VARIABLES:
        env[TOOL_VARIABLES[tool]] = url
    return env
