"""Figures are views of numbers a run writes anyway (JSON and markdown), so matplotlib is the optional `plots` extra:
without it a run draws nothing, says once how to add it, and loses no result."""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

from ..errors import missing_extra

__all__ = ["pyplot"]

_log = logging.getLogger("maestro.plots")
_warned = False


def pyplot(figure: str) -> Any | None:
    """matplotlib's pyplot on the file-only Agg backend, or None (with one warning per process naming `figure`, the
    first one skipped) when the `plots` extra is not installed."""
    global _warned
    if importlib.util.find_spec("matplotlib") is None:
        if not _warned:
            _warned = True
            _log.warning("%s not drawn: %s", figure, missing_extra("plots", "figures", "matplotlib"))
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
