"""Labs and experiments on disk: finding them, reading them, refusing malformed ones early.

A lab is a directory with `starforge.yaml` (found by walking up from the current directory, like
git finds `.git`); its experiments are `experiments/<name>/` folders holding `config.yaml`,
`recipe.lock.json` and, for `custom/custom`, `train.sh`. Every problem found here is a usage
error (exit 2) naming the file and line, because nothing has been sent yet.
"""

from __future__ import annotations

import difflib
import json
import pathlib
import re
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from starforge_api.job.v1 import job_spec_pb2

from cli import yamlfile
from cli.errors import usage

LAB_FILE = "starforge.yaml"
EXPERIMENTS = "experiments"
CONFIG = "config.yaml"
LOCK = "recipe.lock.json"
TRAIN_SH = "train.sh"
CUSTOM_METHOD = "custom/custom"
LAB_KEYS = ("name", "project", "package")
PACKAGE_KEYS = ("include", "exclude")

USER_RE = re.compile(r"^[a-z][a-z0-9-]{1,31}$")
PROJECT_RE = re.compile(r"^@([a-z][a-z0-9-]{1,31})/([a-z0-9][a-z0-9._-]{0,62})$")
LAB_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
EXPERIMENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


@dataclass(frozen=True)
class LabSettings:
    """The content of starforge.yaml.

    `name` is the lab's name; `project` is "@<user>/<name>". A file may give either or both: with only
    `name`, the project is the submitting user's (`@<you>/<name>`, resolved at submit)."""

    project: str
    name: str = ""
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True)
class Experiment:
    """One experiment folder of a lab."""

    name: str
    dir: pathlib.Path
    lab_root: pathlib.Path

    @property
    def config_path(self) -> pathlib.Path:
        return self.dir / CONFIG

    @property
    def lock_path(self) -> pathlib.Path:
        return self.dir / LOCK

    @property
    def train_sh(self) -> pathlib.Path:
        return self.dir / TRAIN_SH

    def rel(self, path: pathlib.Path) -> str:
        """`path` relative to the lab root, as users see it in messages."""
        return path.relative_to(self.lab_root).as_posix()

    def load_config(self) -> tuple[yamlfile.YamlDoc, dict[str, Any]]:
        """config.yaml parsed; it must be a mapping (an empty file is an empty mapping)."""
        if not self.config_path.is_file():
            raise usage(f"{self.rel(self.config_path)} not found", hint=f"`sf new {self.name}` writes one")
        doc = yamlfile.load(self.config_path)
        data = doc.data if doc.data is not None else {}
        if not isinstance(data, dict):
            raise doc.error((), f"{CONFIG} must be a mapping of settings, not a {type(data).__name__}")
        return doc, data

    def load_lock(self) -> job_spec_pb2.RecipeLock:
        """recipe.lock.json as a RecipeLock; missing or malformed is a usage error with the fix."""
        rel = self.rel(self.lock_path)
        try:
            text = self.lock_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise usage(
                f"{rel} not found: the experiment is not pinned to a recipe version",
                hint=f"run `sf recipe upgrade {self.name}` to write it",
            ) from None
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise usage(f"{rel}:{exc.lineno}: invalid JSON: {exc.msg}") from None
        try:
            lock = json_format.ParseDict(raw, job_spec_pb2.RecipeLock())
        except json_format.ParseError as exc:
            raise usage(
                f"{rel}: not a recipe lock: {exc}", hint=f"`sf recipe upgrade {self.name}` rewrites it"
            ) from None
        if not lock.method:
            raise usage(f"{rel}: `method` is missing", hint=f"`sf recipe upgrade {self.name}` rewrites it")
        return lock


@dataclass(frozen=True)
class Lab:
    """A lab: its root folder and settings."""

    root: pathlib.Path
    settings: LabSettings

    @property
    def file(self) -> pathlib.Path:
        return self.root / LAB_FILE

    @property
    def experiments_dir(self) -> pathlib.Path:
        return self.root / EXPERIMENTS

    def experiment_names(self) -> list[str]:
        """Names of the experiment folders, sorted."""
        if not self.experiments_dir.is_dir():
            return []
        return sorted(p.name for p in self.experiments_dir.iterdir() if p.is_dir() and not p.name.startswith("."))

    def experiment(self, name: str) -> Experiment:
        """The experiment `name`; unknown names are refused with the list of existing ones."""
        check_experiment_name(name)
        path = self.experiments_dir / name
        if not path.is_dir():
            existing = self.experiment_names()
            details = [f"existing experiments: {', '.join(existing)}"] if existing else []
            close = difflib.get_close_matches(name, existing, n=1)
            if close:
                details.append(f"did you mean `{close[0]}`?")
            hint = f"create it with `sf new {name} --method <framework>/<method>`"
            if not existing:
                details.append(f"the lab at {self.root} has no experiments yet")
            raise usage(
                f"unknown experiment `{name}`: {EXPERIMENTS}/{name}/ does not exist", details=details, hint=hint
            )
        return Experiment(name=name, dir=path, lab_root=self.root)


def check_experiment_name(name: str) -> None:
    """Experiment names become folder names and labels: keep them simple."""
    if not EXPERIMENT_RE.match(name):
        raise usage(
            f"invalid experiment name `{name}`: use letters, digits, '.', '_' and '-' (at most 63, "
            "starting with a letter or digit)"
        )


def find_lab_root(start: pathlib.Path) -> pathlib.Path | None:
    """The nearest folder at or above `start` holding starforge.yaml, or None."""
    here = start.resolve()
    for folder in (here, *here.parents):
        if (folder / LAB_FILE).is_file():
            return folder
    return None


def find_lab(start: pathlib.Path) -> Lab:
    """The lab containing `start`; a usage error when there is none."""
    root = find_lab_root(start)
    if root is None:
        raise usage(
            f"not inside a lab: no {LAB_FILE} in {start.resolve()} or any parent folder",
            hint="run `sf init` to make this folder a lab",
        )
    return Lab(root=root, settings=load_settings(root / LAB_FILE))


def load_settings(path: pathlib.Path) -> LabSettings:
    """Parse and check starforge.yaml; every problem names the file and line."""
    doc = yamlfile.load(path)
    data = doc.data
    if data is None:
        raise doc.error((), f'empty {LAB_FILE}: it needs at least `project: "@<user>/<name>"`')
    if not isinstance(data, dict):
        raise doc.error((), f"{LAB_FILE} must be a mapping with keys {', '.join(LAB_KEYS)}")
    for key in data:
        if key not in LAB_KEYS:
            raise doc.error((str(key),), _unknown_key(str(key), LAB_KEYS))
    project, name = _project_and_name(doc, data)
    package = data.get("package")
    include: list[str] = []
    exclude: list[str] = []
    if package is not None:
        if not isinstance(package, dict):
            raise doc.error(("package",), "`package` must be a mapping with `include` and `exclude` lists")
        for key in package:
            if key not in PACKAGE_KEYS:
                raise doc.error(("package", str(key)), _unknown_key(str(key), PACKAGE_KEYS, "package."))
        include = _globs(doc, package, "include")
        exclude = _globs(doc, package, "exclude")
    return LabSettings(project=project, name=name, include=tuple(include), exclude=tuple(exclude))


def _project_and_name(doc: yamlfile.YamlDoc, data: dict[str, Any]) -> tuple[str, str]:
    """(project, name) from `project:` and/or `name:`; project is "" when only the name is given."""
    project, name = data.get("project"), data.get("name")
    if project is None and name is None:
        raise doc.error((), '`name` is missing; add `name: my-lab` (or `project: "@<user>/my-lab"`)')
    if name is not None and (not isinstance(name, str) or not LAB_NAME_RE.match(name)):
        raise doc.error(
            ("name",), f"`name` must be 1-63 of a-z 0-9 . _ -, starting with a letter or digit; got {name!r}"
        )
    if project is None:
        return "", str(name)
    match = PROJECT_RE.match(project) if isinstance(project, str) else None
    if match is None:
        raise doc.error(
            ("project",),
            f'`project` must look like "@<user>/<name>" (e.g. "@alice/my-lab"), got {project!r}',
        )
    if name is not None and name != match.group(2):
        raise doc.error(("name",), f"`name: {name}` disagrees with `project: {project}`; keep one of them")
    return str(project), match.group(2)


def _globs(doc: yamlfile.YamlDoc, package: dict[str, Any], key: str) -> list[str]:
    value = package.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise doc.error(("package", key), f"`package.{key}` must be a list of glob patterns")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise doc.error(("package", key, i), f"`package.{key}` entries must be non-empty strings")
        if ".." in pathlib.PurePosixPath(item).parts:
            raise doc.error(("package", key, i), f"`package.{key}` pattern {item!r} may not contain '..'")
        out.append(item.strip())
    return out


def _unknown_key(key: str, allowed: tuple[str, ...], prefix: str = "") -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    suggestion = f"; did you mean `{prefix}{close[0]}`?" if close else ""
    return f"unknown key `{prefix}{key}`{suggestion} (allowed: {', '.join(prefix + a for a in allowed)})"


def project_name_for(folder: pathlib.Path) -> str:
    """A valid project name derived from a folder name ("My Lab" -> "my-lab")."""
    name = re.sub(r"[^a-z0-9._-]+", "-", folder.resolve().name.lower()).strip("-._")
    return name[:63] or "lab"
