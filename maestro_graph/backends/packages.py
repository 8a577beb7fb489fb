"""Whether optional packages are importable, without importing them: the availability checks of experts and of
local router models."""

from __future__ import annotations

__all__ = ["missing_package"]


def missing_package(*modules: str) -> str | None:
    """The first of `modules` that cannot be imported, for `unavailable_reason` checks; None when all are there.
    A module already imported (or being imported by another thread, when its `__spec__` is still None) counts as
    present, so concurrent checks never raise."""
    import importlib.util
    import sys

    for module in modules:
        if module in sys.modules:
            continue
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except ValueError:  # a module mid-import in another thread
            continue
    return None

