"""`maestro examples`: the example images the package ships, by name, so an install without the repository can run
the README's questions (`maestro ask ... --image example:qrcode.png`, or the path this command prints)."""

from __future__ import annotations

import difflib
from pathlib import Path

import typer

from .common import fail

__all__ = ["EXAMPLE_PREFIX", "example_path", "examples"]

EXAMPLE_PREFIX = "example:"
"""How `maestro ask --image` names a packaged example image: `example:NAME` (`maestro examples` lists the names)."""


def _shipped() -> dict[str, Path]:
    from ...core.bundled import bundled_dir

    return {p.name: p for p in sorted(bundled_dir("examples").iterdir()) if p.suffix.lower() in (".png", ".jpg")}


def example_path(name: str) -> Path:
    """The packaged example image `name` (`qrcode.png`, or `qrcode`); a usage error listing the names otherwise."""
    shipped = _shipped()
    found = shipped.get(name) or shipped.get(f"{name}.png")
    if found is None:
        close = difflib.get_close_matches(name, list(shipped), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        fail(f"no packaged example {name!r}; {hint}the examples are {', '.join(shipped)} "
             "(`maestro examples` lists them with their paths)")
    return found


def examples(name: str | None = typer.Argument(None, help="An example's name (e.g. qrcode.png): print only its "
                                                            "path, for `--image \"$(maestro examples qrcode.png)\"`.")
             ) -> None:
    """List the example images the package ships, with their paths.

    One per line: name, then path; with NAME, that image's path only. `maestro ask` also takes one as `--image
    example:NAME`, e.g. `maestro ask "What text does the QR code encode?" --image example:qrcode.png`, from any
    directory."""
    if name is not None:
        print(example_path(name))
        return
    shipped = _shipped()
    width = max(map(len, shipped), default=0)
    for entry, path in shipped.items():
        print(f"{entry:<{width}}  {path}")
