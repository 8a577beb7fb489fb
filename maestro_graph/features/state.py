"""Cheap state features shared by learned routers: question embeddings and a few image descriptors.

Only what a policy may see goes in: the question, the choices and the images (never answer, source, domain, meta).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..core.memo import LRU
from ..digests import file_digest
from ..errors import InputError
from ..images.load import load_image
from .embeddings import EMBED_DIM, embed

__all__ = ["IMAGE_DIM", "image_descriptors", "nearest", "question_features", "similarity_mean", "unit_rows",
           "QUESTION_DIM", "DESCRIPTION_CAP"]

IMAGE_DIM = 8
QUESTION_DIM = EMBED_DIM + IMAGE_DIM
DESCRIPTION_CAP = 4096
"""Image descriptions kept in memory, keyed by the image's content digest (a data URL of several MB is never kept
as a key)."""
_descriptions: LRU[str, tuple[float, ...]] = LRU(DESCRIPTION_CAP)


def _describe(ref: str) -> tuple[float, ...]:
    """The descriptors of one image, memoised by content: a file rewritten in place is described again, and the
    same bytes in two files are described once."""
    key = file_digest(ref)
    found = _descriptions.get(key)
    if found is None:
        found = _compute_descriptors(ref)
        _descriptions.put(key, found)
    return found


def _compute_descriptors(ref: str) -> tuple[float, ...]:
    try:
        image = load_image(ref)
    except InputError:
        return (1.0, 0, 0, 0, 0, 0, 0, 1.0)  # an unreadable image is itself a feature
    small = np.asarray(image.resize((128, 128))).astype(np.float32) / 255.0
    gray = small.mean(axis=2)
    white = float((gray > 0.92).mean())
    chroma = float((small.max(axis=2) - small.min(axis=2)).mean())
    edges = float((np.abs(np.diff(gray, axis=0)) > 0.15).mean() + (np.abs(np.diff(gray, axis=1)) > 0.15).mean())
    w, h = image.info.get("maestro_source_size", image.size)  # as the file declares it, not as decoded
    return (1.0, np.log1p(w) / 8, np.log1p(h) / 8, float(np.log(w / h)), white, chroma, edges, 0.0)


def image_descriptors(images: Sequence[str]) -> np.ndarray:
    """[has image, log width, log height, log aspect, white share, colourfulness, edge density, unreadable]
    of the first image (zeros when there is none)."""
    if not images:
        return np.zeros(IMAGE_DIM, dtype=np.float32)
    return np.asarray(_describe(images[0]), dtype=np.float32)


def question_features(questions: list[str], images: Sequence[Sequence[str]],
                      choices: list | None = None) -> np.ndarray:
    """Embedding of the question (with its options, when any) next to the image descriptors."""
    texts = [q + (" Options: " + " | ".join(c) if c else "")
             for q, c in zip(questions, choices or [None] * len(questions))]
    return np.hstack([embed(texts), np.stack([image_descriptors(i) for i in images])]).astype(np.float32)


def unit_rows(features: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (cosine similarity becomes a dot product); an all-zero row stays zero."""
    norms = np.linalg.norm(features, axis=-1, keepdims=True)
    return (features / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def nearest(rows: np.ndarray, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The indices of the k `rows` (unit length) most similar to `query`, and their cosine similarities."""
    sims = rows @ unit_rows(query)
    index = np.argsort(-sims)[: min(k, len(rows))]
    return index, sims[index]


def similarity_mean(values: np.ndarray, sims: np.ndarray) -> np.ndarray:
    """The mean of `values` (one row per neighbour) weighted by the neighbours' cosine similarities: what questions
    like this one scored (the kNN router's pair scores, a registry's reach)."""
    weights = np.maximum(sims, 0) + 1e-6
    return (weights.reshape(-1, *[1] * (values.ndim - 1)) * values).sum(0) / weights.sum()
