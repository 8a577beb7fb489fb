"""A thread's images kept once in the graph's store (`build_graph(store=...)`, the Agent Server's), so that no
checkpoint repeats an image's bytes: the state holds `IMAGE_REF` references to them. Where images enter an episode
(intake, and `episode.past_intake` for what a client writes past it) they are `verified`; the nodes after that read
them back with `fetched` alone."""

from __future__ import annotations

import hashlib
from typing import Any

from langgraph.store.base import BaseStore

from ..images.sources import ImageRefused, ImageSources

__all__ = ["IMAGE_NAMESPACE", "IMAGE_REF", "fetched", "image_list", "stored", "stored_input", "verified"]

IMAGE_NAMESPACE = ("maestro", "images")
"""Where a thread's images are kept, once per content digest."""
IMAGE_REF = "maestro-image:"


def stored(store: BaseStore | None, images: list[str]) -> list[str]:
    """The images as the state keeps them: with a store, each data URL put there once under its content digest and
    replaced by its `IMAGE_REF` reference (file paths and URLs are short: kept as they are)."""
    if store is None:
        return images
    refs = []
    for image in images:
        if image.startswith("data:"):
            key = hashlib.sha256(image.encode()).hexdigest()
            if store.get(IMAGE_NAMESPACE, key) is None:
                store.put(IMAGE_NAMESPACE, key, {"url": image})
            image = IMAGE_REF + key
        refs.append(image)
    return refs


def stored_input(store: BaseStore | None, graph_input: dict[str, Any]) -> dict[str, Any]:
    """A run's input with its images, and those of every turn of its `history`, kept in the store as `stored` keeps
    them: a door hands the graph references, so the checkpoints a run writes before intake (its input, the state
    that enters intake) hold none of the bytes either, and an image a client resends with each question, or repeats
    in several turns of its history, is stored once. A field of the wrong type is left as it is, for intake to name
    (`written_state`)."""
    if store is None:
        return graph_input
    out = dict(graph_input)
    if image_list(out.get("images")):
        out["images"] = stored(store, out["images"])
    if isinstance(out.get("history"), list):
        out["history"] = [{**turn, "images": stored(store, turn["images"])}
                          if isinstance(turn, dict) and image_list(turn.get("images")) else turn
                          for turn in out["history"]]
    return out


def image_list(value: Any) -> bool:
    """Whether `value` is a list of image references (strings), as the state's `images` holds them; anything else is
    the nodes' to name (`episode.written_state`)."""
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def fetched(store: BaseStore | None, images: list[str]) -> list[str]:
    """The images with every `IMAGE_REF` reference replaced by the stored image; one no longer stored (the store's
    retention removed it) is the request's ImageRefused: the image must be sent again."""
    out = []
    for i, image in enumerate(images):
        if image.startswith(IMAGE_REF):
            item = store.get(IMAGE_NAMESPACE, image.removeprefix(IMAGE_REF)) if store is not None else None
            if item is None:
                raise ImageRefused(400, "image_expired", f"image {i} of the conversation is no longer stored (its "
                                   "retention ran out); send it again", param=f"images.{i}")
            image = item.value["url"]
        out.append(image)
    return out


def verified(store: BaseStore | None, images: list[str], sources: ImageSources | None) -> list[str]:
    """The images as an episode takes them in: stored ones fetched, then, under an image-source policy (a graph served
    to clients), each resolved to a verified data URL (ImageRefused naming the first refused); without one (the
    operator's own graph) as they are."""
    found = fetched(store, images)
    return sources.resolve(found) if sources is not None and found else found
