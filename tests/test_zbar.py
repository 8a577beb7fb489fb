"""ZBar, the barcode reader no training run has seen: it reads the real barcode samples through its card in
configs/registry-zbar.yaml, and the shipped policy, meeting its card for the first time, scores its pair."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import real_tasks
from PIL import Image

from maestro_graph.experts.zbar_barcode import ZBarExpert
from maestro_graph.policy import make_policy
from maestro_graph.policy.base import ActionSpace, EpisodeView
from maestro_graph.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
needs_zbar = pytest.mark.skipif(ZBarExpert.unavailable_reason() is not None,
                                reason=str(ZBarExpert.unavailable_reason()))


@needs_zbar
def test_zbar_reads_real_barcodes():
    tasks = real_tasks("barcode")
    expert = ZBarExpert()
    right = sum(any(t.score(b.text) >= 1 for b in expert.decode(Image.open(t.images[0]))) for t in tasks)
    assert right >= 4, f"ZBar read {right} of {len(tasks)} real barcode samples"
    assert all(isinstance(b.box[0], (int, float)) for t in tasks for b in expert.decode(Image.open(t.images[0])))


@needs_zbar
def test_the_shipped_policy_scores_the_unseen_card():
    registry = Registry.load(ROOT / "configs" / "registry-zbar.yaml")
    task = real_tasks("barcode")[0]
    view = EpisodeView(task.question, tuple(task.images), None, (), 4, 10.0)
    dist = make_policy("neural").distribution(view, ActionSpace.build(registry, view))
    pairs = {getattr(a, "pair", None): p for a, p in zip(dist.actions, dist.probs)}
    assert "zbar@@barcode-reading" in pairs and pairs["zbar@@barcode-reading"] > 0
