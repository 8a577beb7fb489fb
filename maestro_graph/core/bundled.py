"""Where the folders the package ships beside its code are: the packaged skills and the example images.

They are the repository's top-level `skills/` and `examples/` (data, not library code); the build maps them into the
package as `maestro_graph.skills` and `maestro_graph.examples` (setup.py), so the import system finds them in a wheel
and in an editable install alike, and no path here guesses a layout."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Literal

__all__ = ["Bundled", "bundled_dir"]

Bundled = Literal["skills", "examples"]


def bundled_dir(name: Bundled) -> Path:
    """The folder of the shipped `name` (`skills` or `examples`)."""
    return Path(str(files(f"maestro_graph.{name}")))
