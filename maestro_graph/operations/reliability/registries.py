"""Registries the reliability suites run on: the fast default experts with faults injected."""

from __future__ import annotations

from pathlib import Path

import yaml

from ...registry import load_config

__all__ = ["FAST_MODELS", "fault_registry"]

FAST_MODELS = ("zxing", "opencv-barcode", "opencv-vision", "sympy")
"""The default registry's experts that answer in well under a second, so hundreds of faulty episodes fit in
minutes; fault handling does not depend on which expert is behind the handle."""


def fault_registry(folder: Path, faults: dict | None, *, attempts: int = 3, timeout_s: float = 1.5,
                   hang_s: float = 3.0, seed: int = 0) -> Path:
    """A registry file of the fast default experts with these faults injected into each (None: no faults); hangs
    last `hang_s`, beyond the cards' `timeout_s`. Returns the file's path (it documents the run)."""
    base = load_config()
    models = []
    for card in base.models:
        if card.name not in FAST_MODELS:
            continue
        raw = card.model_dump(mode="json", exclude_defaults=True)
        raw.update(timeout_s=timeout_s, concurrency=4, cacheable=False,
                   retries={"attempts": attempts, "backoff_s": 0.05, "max_backoff_s": 0.5},
                   breaker={"failures": 8, "open_s": 1.0})
        if faults is not None:
            raw["faults"] = {**faults, "hang_s": hang_s, "seed": seed}
        models.append(raw)
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump({"skill_dirs": [str(p) for p in base.skill_paths()], "models": models},
                                   sort_keys=False))
    return path
