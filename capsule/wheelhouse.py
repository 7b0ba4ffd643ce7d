"""The runner's pinned pure-Python wheels: parsing capsule/runner-requirements.txt, and filling
build/wheelhouse from PyPI (once) so that later builds work offline.

Every wheel is checked against the sha256 pinned in the requirements file, whether it was just
downloaded or found in the wheelhouse, and must be tagged ``none-any``: the pex runs on whatever
Python the training image has, on any CPU.
"""

from __future__ import annotations

import hashlib
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

# The Python versions the runner supports; one pex serves them all.
PYTHON_TARGETS = ("3.10", "3.11", "3.12", "3.13")
_LINE_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)\s*"
    r"(?:;\s*(?P<marker>.*?))?\s*--hash=sha256:(?P<sha>[0-9a-f]{64})\s*$"
)
_CLAUSE_RE = re.compile(r"""^python_version\s*(?P<op><=|>=|==|!=|<|>)\s*["'](?P<ver>\d+\.\d+)["']$""")


class BuildError(Exception):
    """A build step failed; the message says which and how to fix it."""


def _version_tuple(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


_OPS = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    marker: str
    sha256: str

    @property
    def requirement(self) -> str:
        """The requirement as pex sees it (no hash; the build checks hashes itself)."""
        return f"{self.name}=={self.version}" + (f"; {self.marker}" if self.marker else "")

    @property
    def dist_prefix(self) -> str:
        """Wheel file names start with this (normalised name and version)."""
        return f"{re.sub(r'[-_.]+', '_', self.name).lower()}-{self.version}-"

    def pythons(self) -> list[str]:
        """The PYTHON_TARGETS this pin applies to (markers: python_version clauses joined by 'and')."""
        if not self.marker:
            return list(PYTHON_TARGETS)
        matches = []
        clauses = [c.strip() for c in self.marker.split(" and ")]
        parsed = []
        for clause in clauses:
            m = _CLAUSE_RE.match(clause)
            if m is None:
                raise BuildError(f"runner-requirements.txt: unsupported marker {self.marker!r}")
            parsed.append((m["op"], _version_tuple(m["ver"])))
        for target in PYTHON_TARGETS:
            version = _version_tuple(target)
            if all(_OPS[op](version, ver) for op, ver in parsed):
                matches.append(target)
        return matches


def parse_requirements(text: str) -> list[Pin]:
    """Parse ``name==version [; marker] --hash=sha256:<hex>`` lines (``\\`` continues a line)."""
    pins = []
    joined = re.sub(r"\\\n\s*", " ", text)
    for number, raw in enumerate(joined.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE_RE.match(line)
        if m is None:
            raise BuildError(
                f"runner-requirements.txt line {number}: expected 'name==version [; marker] "
                f"--hash=sha256:<hex>', got {raw.strip()!r}"
            )
        pins.append(Pin(m["name"], m["version"], (m["marker"] or "").strip(), m["sha"]))
    for target in PYTHON_TARGETS:
        names = [p.name.lower() for p in pins if target in p.pythons()]
        if len(names) != len(set(names)):
            raise BuildError(f"runner-requirements.txt pins a package twice for Python {target}")
    return pins


def sha256_file(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def check_pure(wheel: pathlib.Path) -> None:
    """Refuse a wheel whose tags are not ``<py>-none-any``."""
    parts = wheel.name[: -len(".whl")].split("-")
    if len(parts) < 5 or parts[-2] != "none" or parts[-1] != "any" or not parts[-3].startswith("py"):
        raise BuildError(f"{wheel.name} is not a pure-Python (py3-none-any) wheel; the runner must not carry one")


def _find(wheelhouse: pathlib.Path, pin: Pin) -> pathlib.Path | None:
    for candidate in sorted(wheelhouse.glob("*.whl")):
        if candidate.name.lower().startswith(pin.dist_prefix) and sha256_file(candidate) == pin.sha256:
            return candidate
    return None


def _download(wheelhouse: pathlib.Path, pin: Pin, python: str) -> pathlib.Path:
    with tempfile.TemporaryDirectory(dir=wheelhouse, prefix=".download-") as tmp:
        cmd = [
            sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
            "--only-binary=:all:", "--platform", "any", "--implementation", "py", "--abi", "none",
            "--python-version", python, "--dest", tmp, f"{pin.name}=={pin.version}",
        ]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wheels = list(pathlib.Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or len(wheels) != 1:
            noise = ("Location 'file://", "is ignored: it is neither")
            detail = "\n".join(line for line in proc.stderr.strip().splitlines() if not any(n in line for n in noise))
            raise BuildError(
                f"could not download {pin.name}=={pin.version} (pure wheel for Python {python}) into "
                f"{wheelhouse}: PyPI is unreachable and the wheelhouse does not have it, or no such "
                f"wheel exists.\n{detail[-2000:]}"
            )
        wheel = wheels[0]
        check_pure(wheel)
        got = sha256_file(wheel)
        if got != pin.sha256:
            raise BuildError(
                f"{wheel.name}: sha256 {got} does not match the pin {pin.sha256} in "
                "capsule/runner-requirements.txt; refusing to build with it"
            )
        target = wheelhouse / wheel.name
        shutil.move(str(wheel), target)
        return target


def ensure_wheels(wheelhouse: pathlib.Path, pins: list[Pin]) -> list[pathlib.Path]:
    """Every pinned wheel in ``wheelhouse`` (downloading only what is missing), hash-checked."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    wheels = []
    for pin in pins:
        pythons = pin.pythons()
        if not pythons:
            raise BuildError(f"{pin.requirement} applies to none of Python {', '.join(PYTHON_TARGETS)}")
        wheel = _find(wheelhouse, pin) or _download(wheelhouse, pin, pythons[0])
        check_pure(wheel)
        wheels.append(wheel)
    return wheels
