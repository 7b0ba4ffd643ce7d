"""`make dist`: StarForge as wheels, ready for `pip install` (docs/deploy.md).

    python -m tools.build_dist [--out dist]

writes exactly three wheels into the output directory (older StarForge wheels there are removed):

    dist/starforge-<version>-py3-none-any.whl       sf, starforge-control, starforge-executor, forgelet
    dist/starforge_api-<version>-py3-none-any.whl   the Python client package (`import starforge_api`)
    dist/starforge_sdk-<sdk version>-py3-none-any.whl  the capsule SDK (`import starforge`), for images

The platform wheel holds the packages (cli, control, executor_svc, forgelet, recipes, capsule,
common), the runner's generated messages (sfpb from gen/pure) and, as package data of `control`
(control/bundled.py), what is built rather than written; it requires `starforge-api` at its own
version (tools/api_wheel.py: gen/python's grpcio code, a wheel of its own so that a client needs
nothing else of StarForge):

    control/assets/capsule/   the capsule: runner-<digest>.pex, bootstrap.sh, the SDK, manifest.json
    control/assets/web/       the built web console (web/dist)

The checkout stays as it is: the sources are staged into build/dist-stage (git's view of them:
tracked and untracked files, never ignored ones), the assets are added there, and pip builds the
wheel from the stage with this environment's setuptools (no network). The capsule is (re)built
first (a no-op when current); the web console must have been built (`make web`, which `make dist`
runs).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tomllib
import zipfile

from capsule import build as capsule_build
from capsule import sdk_wheel
from capsule.wheelhouse import BuildError
from tools import api_wheel

REPO = pathlib.Path(__file__).resolve().parents[1]
STAGE = REPO / "build" / "dist-stage"
# Source trees of the wheel, as they sit in the checkout; pyproject.toml's [tool.setuptools]
# says which packages they hold.
SOURCES = (
    "pyproject.toml", "README.md", "cli", "control", "executor_svc", "forgelet", "recipes", "capsule", "common",
    "gen/pure/sfpb",
)  # fmt: skip
ASSETS = pathlib.Path("control") / "assets"
WEB_DIST = REPO / "web" / "dist"
CAPSULE_OUT = REPO / "build" / "capsule"
WHEELHOUSE = REPO / "build" / "wheelhouse"
# Top-level names the platform wheel must hold, and the one it must never hold (the SDK's).
TOP_LEVEL = {"cli", "control", "executor_svc", "forgelet", "recipes", "capsule", "common", "sfpb"}
SDK_NAME = "starforge"


class DistError(Exception):
    """The wheels cannot be built; the message says why."""


def version() -> str:
    return api_wheel.version()  # pyproject.toml's, the one the three wheels share


def source_files() -> list[pathlib.Path]:
    """The files under SOURCES, relative to the checkout: git's view (tracked and untracked, never
    ignored: no __pycache__, no egg-info, no build outputs), else every file but caches."""
    proc = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *SOURCES],
        capture_output=True,
        check=False,
    )
    if proc.returncode == 0:
        names = [pathlib.Path(n) for n in proc.stdout.decode().split("\0") if n]
    else:  # not a git checkout (a source archive)
        names = []
        for top in SOURCES:
            path = REPO / top
            items = [path] if path.is_file() else sorted(path.rglob("*"))
            names += [p.relative_to(REPO) for p in items if p.is_file() and "__pycache__" not in p.parts]
    return sorted({n for n in names if (REPO / n).is_file() and n.suffix != ".pyc"})


def stage_sources(stage: pathlib.Path) -> None:
    for name in source_files():
        target = stage / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)


def stage_pyproject(stage: pathlib.Path) -> None:
    """The staged pyproject.toml without the generated grpcio code (the API wheel's) and requiring
    that wheel at this version. The checkout's own keeps both: its editable install serves them."""
    path = stage / "pyproject.toml"
    text = path.read_text()
    include, depends = '"starforge_api*", ', "dependencies = [\n"
    if include not in text or depends not in text:
        raise DistError(f"pyproject.toml: expected {include!r} in packages.find and a {depends.strip()!r} list")
    text = text.replace(include, "", 1).replace(depends, f'{depends}  "{api_wheel.requirement()}",\n', 1)
    path.write_text(text)


def stage_capsule(capsule_dir: pathlib.Path, target: pathlib.Path) -> str:
    """The built capsule's files and a manifest whose sources are relative to it (the build's
    manifest names absolute paths of this machine). Returns the runner's file name."""
    manifest = json.loads((capsule_dir / "manifest.json").read_text())
    target.mkdir(parents=True)
    for entry in manifest["files"]:
        dest = target / entry["path"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pathlib.Path(entry["source"]), dest)
        dest.chmod(0o755 if entry["executable"] else 0o644)
        entry["source"] = entry["path"]
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return str(manifest["runner"]["path"])


def stage_web(web_dist: pathlib.Path, target: pathlib.Path) -> None:
    if not (web_dist / "index.html").is_file():
        raise DistError(f"the web console is not built ({web_dist / 'index.html'} is missing): run `make web`")
    shutil.copytree(web_dist, target)


def check_wheel(wheel: pathlib.Path, runner: str) -> None:
    """What the wheel must hold (and must not): its top-level names, the capsule, the UI."""
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    if SDK_NAME in top:
        raise DistError(f"{wheel.name} holds a top-level {SDK_NAME!r} package: that name is the SDK's")
    if top != TOP_LEVEL:
        raise DistError(f"{wheel.name}: top-level packages {sorted(top)}, expected {sorted(TOP_LEVEL)}")
    needed = [
        f"control/assets/capsule/{runner}", "control/assets/capsule/manifest.json",
        "control/assets/capsule/bootstrap.sh", "control/assets/web/index.html",
        "control/db/migrations/env.py", "sfpb/__init__.py",
    ]  # fmt: skip
    missing = [n for n in needed if n not in names]
    if missing:
        raise DistError(f"{wheel.name} lacks {', '.join(missing)}")


def requirements() -> list[str]:
    """What `pip install 'starforge[ui]'` needs: pyproject.toml's dependencies and the ui extra."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["ui"]]


def build(out: pathlib.Path, *, stage: pathlib.Path = STAGE, web_dist: pathlib.Path = WEB_DIST) -> list[pathlib.Path]:
    """Build the three wheels into `out` (staging in `stage`, emptied first); returns their paths,
    the platform wheel first."""
    capsule_build.build(CAPSULE_OUT, WHEELHOUSE)  # a no-op when build/capsule is current
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    stage_sources(stage)
    stage_pyproject(stage)
    if (stage / ASSETS).exists():
        raise DistError(f"{ASSETS} exists in the sources; it is made by `make dist` only")
    runner = stage_capsule(CAPSULE_OUT, stage / ASSETS / "capsule")
    stage_web(web_dist, stage / ASSETS / "web")
    out.mkdir(parents=True, exist_ok=True)
    for old in [
        *out.glob("starforge-*.whl"),
        *out.glob(f"{api_wheel.DIST}-*.whl"),
        *out.glob(f"{sdk_wheel.DIST}-*.whl"),
    ]:
        old.unlink()
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(out), str(stage)],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise DistError(f"pip wheel failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr).strip()[-4000:]}")
    wheel = out / f"starforge-{version()}-py3-none-any.whl"
    if not wheel.is_file():
        raise DistError(f"pip wheel did not write {wheel}")
    check_wheel(wheel, runner)
    return [wheel, api_wheel.build(out), sdk_wheel.build(out)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.build_dist", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=REPO / "dist", help="directory for the wheels")
    parser.add_argument(
        "--print-requirements",
        action="store_true",
        help="print what the platform wheel with its [ui] extra requires, one a line, and build nothing",
    )
    args = parser.parse_args(argv)
    if args.print_requirements:
        print("\n".join(requirements()))
        return 0
    try:
        wheels = build(args.out.resolve())
    except (DistError, BuildError) as exc:
        print(f"make dist: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # an output directory that cannot be made or written
        print(f"make dist: error: {exc.filename or args.out}: {exc.strerror}", file=sys.stderr)
        return 1
    for wheel in wheels:
        print(f"{wheel} ({wheel.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
