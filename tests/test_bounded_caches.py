"""In-process memos are bounded (docs/security.md: every cache is bounded): question embeddings and image descriptors
keep their most recent entries up to a cap, keyed by digests rather than by the (possibly huge) text or data URL."""

from __future__ import annotations

import base64
import io

import numpy as np
from PIL import Image

from maestro_graph.core.memo import LRU
from maestro_graph.features import embeddings
from maestro_graph.features import state as features


def test_lru_keeps_the_most_recently_used_entries():
    memo: LRU[str, int] = LRU(2)
    memo.put("a", 1)
    memo.put("b", 2)
    assert memo.get("a") == 1  # now "b" is the oldest
    memo.put("c", 3)
    assert (memo.get("a"), memo.get("b"), memo.get("c"), len(memo)) == (1, None, 3, 2)


def test_embedding_memo_stays_within_its_cap_and_results_are_unchanged(monkeypatch):
    cap = 5
    monkeypatch.setattr(embeddings, "_memo", LRU(cap))
    texts = [f"How many circles are in image number {i}?" for i in range(cap + 10)]
    together = embeddings.embed(texts)  # more new texts in one call than the memo holds
    assert together.shape == (cap + 10, embeddings.EMBED_DIM) and len(embeddings._memo) == cap
    one_by_one = np.vstack([embeddings.embed([t]) for t in texts])
    assert len(embeddings._memo) == cap
    assert np.allclose(together, one_by_one, atol=1e-5)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    assert embeddings.MEMO_CAP == 20_000


def _data_url(shade: int, side: int = 600) -> str:
    noise = np.random.default_rng(shade).integers(0, 255, (side, side, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(noise // 2 + shade).save(buf, format="PNG")
    return f"data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}"


def test_image_descriptors_are_memoised_by_content_within_a_cap(monkeypatch, tmp_path):
    monkeypatch.setattr(features, "_descriptions", LRU(3))
    urls = [_data_url(shade) for shade in range(0, 100, 20)]
    assert min(len(u) for u in urls) > 1_000_000  # each reference is over a megabyte
    described = [features.image_descriptors([u]) for u in urls]
    assert len(features._descriptions) == 3
    assert max(len(key) for key in features._descriptions._data) == 64  # a sha256 digest, not the data URL
    path = tmp_path / "same.png"
    path.write_bytes(base64.b64decode(urls[-1].partition(",")[2]))
    assert np.array_equal(features.image_descriptors([str(path)]), described[-1])  # same pixels, same features
    Image.new("RGB", (50, 200), "white").save(path)  # rewritten in place: described again
    assert features.image_descriptors([str(path)])[2] > features.image_descriptors([str(path)])[1]
