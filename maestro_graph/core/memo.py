"""A bounded in-process memo: every cache is bounded (docs/security.md), since its keys can come from
clients (questions, images)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

__all__ = ["LRU"]

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    """A thread-safe in-process memo holding the `cap` most recently used entries: every cache is bounded
    (docs/security.md), since its keys come from clients."""

    def __init__(self, cap: int):
        if cap < 1:
            raise ValueError(f"an LRU memo needs a cap of at least 1 entry, not {cap}")
        self.cap = cap
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.cap:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)
