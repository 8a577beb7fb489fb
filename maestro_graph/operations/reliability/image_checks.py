"""The trust suite's checks of images and operator files: every image a node reads has
been through the image-source policy, whatever wrote the state; what an image may make a worker hold is bounded
by what is decoded, not by what the file declares; the episode cap answers before anything is decoded; files in the
operator's folders are read no further than the cap, and only regular ones; a SKILL.md cannot hang start-up."""

from __future__ import annotations

import base64
import contextlib
import io
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import numpy as np
import yaml
import zxingcpp
from PIL import Image, ImageDraw

from ...doors.serve import ServeSettings, create_app
from ...doors.serve.loopback import running_app
from ...episode.graph import build_graph
from ...errors import ConfigError
from ...images.load import load_image
from ...images.sources import ImageSources
from ...registry import Registry
from .target import QUESTION, Listener, Target, TrustCase, answer_of, chat, peak_rss_growth_mb

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

__all__ = ["IMAGE_CHECKS", "SECRET_TEXT", "COUNT_QUESTION", "BOMB_SIDE", "SETTLE_S", "secret_qr", "bomb_urls",
           "bomb_request"]

SECRET_TEXT = "MAESTRO-TRUST-SECRET"
"""What a QR code planted outside the allowed directories encodes: it must never appear in a reply."""
COUNT_QUESTION = "How many circles are in the image?"
BOMB_SIDE = 6300
"""A square of this side is 39.7 megapixels: just under `images.MAX_PIXELS`, so the door lets it through."""
BOMB_IMAGES = 8
"""Images in the memory request: `ImageSources.max_images`, the most one request may send."""
IMAGE_MEMORY_LIMIT_MB = 1024.0
"""A request of BOMB_IMAGES images at the pixel cap may add at most this much to the server's RSS."""
SETTLE_S = 5.0
"""How long the RSS is still sampled after the reply: an expert call that timed out is abandoned, not stopped, and
works on its image a little longer."""
SPARSE_FILE_BYTES = 1 << 30
FILE_MEMORY_LIMIT_MB = 100.0
"""What refusing the 1 GB sparse file of an image folder may add to the server's RSS (it was read whole)."""
FRONT_MATTER_LIMIT_S = 2.0
FRONT_MATTER_MESSAGE_CHARS = 2_000


def secret_qr(path: Path) -> Path:
    """A QR code of SECRET_TEXT saved at `path` (WebP): a file whose content would show in a reply
    if a skill read it."""
    code = zxingcpp.write_barcode_to_image(zxingcpp.create_barcode(SECRET_TEXT, zxingcpp.BarcodeFormat.QRCode),
                                           scale=6)
    Image.fromarray(np.asarray(code)).save(path, lossless=True)
    return path


def bomb_urls(count: int) -> list[str]:
    """`count` different two-colour PNGs of BOMB_SIDE x BOMB_SIDE pixels with seven circles, as data URLs of about
    10 KB each: cheap to send, 40 megapixels each to decode (different, so no memo decodes one for another)."""
    return [_bomb_url(shift) for shift in range(count)]


def _bomb_url(shift: int) -> str:
    image = Image.new("L", (BOMB_SIDE, BOMB_SIDE), 255)
    draw = ImageDraw.Draw(image)
    for i in range(7):
        draw.ellipse((300 + 800 * i + shift, 2900, 1000 + 800 * i + shift, 3600), outline=0, width=14)
    buf = io.BytesIO()
    image.convert("P").save(buf, format="PNG", optimize=True)
    return f"data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}"


def bomb_request(images: list[str]) -> dict:
    content = [{"type": "text", "text": COUNT_QUESTION}] + [{"type": "image_url", "image_url": {"url": u}}
                                                              for u in images]
    return {"model": "maestro", "messages": [{"role": "user", "content": content}]}


def state_written_images(t: Target) -> TrustCase:
    """A run on an existing thread of the Agent Server graph (as `graphs/served.py` builds it) that writes its own
    images into the state and jumps past intake straight to a skill, sending it a call on them
    (`Command(goto=Send("barcode-reading", ...))`): a QR code outside the allowed directory, /etc/passwd, missing
    files inside and outside it. None is read, and all get the same reply, so a reply says nothing of what exists;
    the same QR code inside the directory is read."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command, Send

    allowed = t.folder / "allowed-images"
    allowed.mkdir(exist_ok=True)
    secret = secret_qr(t.folder / "secret.webp")
    inside = secret_qr(allowed / "inside.webp")
    graph = build_graph(Registry.load(t.registry_file), image_sources=ImageSources(allowed_dirs=(allowed,)),
                        checkpointer=InMemorySaver())

    def jump(ref: str, thread: str) -> dict:
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        graph.invoke({"question": QUESTION, "images": [t.image]}, config)
        call = {"model": "zxing", "input": "", "question": QUESTION, "images": [ref], "choices": None, "history": []}
        return graph.invoke(Command(goto=Send("barcode-reading", call), update={"images": [ref]}), config)

    refs = [str(secret), f"file://{secret}", "/etc/passwd", str(t.folder / "no-such.webp"),
            str(allowed / "no-such.webp"), str(allowed / ".." / secret.name)]
    replies = [jump(ref, f"jump-{i}") for i, ref in enumerate(refs)]
    leaked = [ref for ref, r in zip(refs, replies) if SECRET_TEXT in str(r) or "root:" in str(r)]
    shapes = {(r["answer"], r["stop_reason"], r["steps"][-1]["error"]) for r in replies}
    read_inside = [s["answer"] for s in jump(str(inside), "jump-inside")["steps"][1:]]
    return TrustCase("images written into a thread's state by a Command that skips intake",
                     "never read outside the allowed directory; one reply for missing and forbidden files",
                     not leaked and len(shapes) == 1 and next(iter(shapes))[0] is None and SECRET_TEXT in read_inside,
                     f"leaked {leaked or 'none'}; {len(shapes)} distinct replies ({sorted(map(str, shapes))[:2]}); "
                     f"the same file inside the directory read as {read_inside}")


def image_memory(t: Target) -> TrustCase:
    """BOMB_IMAGES images of 40 megapixels each (about 10 KB each on the wire) in one request: the server's RSS,
    sampled while it answers, stays within IMAGE_MEMORY_LIMIT_MB of what it held before."""
    bombs = bomb_urls(BOMB_IMAGES)
    with httpx.Client(timeout=600) as client:
        client.post(f"{t.url}/v1/chat/completions", json=bomb_request([t.image]))  # the experts loaded: the baseline
        start = time.perf_counter()
        idle, grown, reply = peak_rss_growth_mb(
            t.pid, lambda: client.post(f"{t.url}/v1/chat/completions", json=bomb_request(bombs)), settle_s=SETTLE_S)
    took = time.perf_counter() - start
    return TrustCase(f"{BOMB_IMAGES} images of {BOMB_SIDE}x{BOMB_SIDE} pixels in one request",
                     f"answered, RSS grows under {IMAGE_MEMORY_LIMIT_MB:g} MB",
                     reply.status_code == 200 and grown < IMAGE_MEMORY_LIMIT_MB,
                     f"status {reply.status_code}, answer {answer_of(reply)!r}, RSS peak {grown:+.0f} MB over "
                     f"{idle:.0f} MB, {took:.1f} s")


def cap_before_decoding(t: Target) -> TrustCase:
    """With every episode slot taken (one slot, held by a router endpoint that never answers), a request of
    BOMB_IMAGES images at the pixel cap is refused (429) before any of them is decoded: in a small part of the
    time decoding them takes."""
    bombs = bomb_urls(BOMB_IMAGES)
    start = time.perf_counter()
    for bomb in bombs:
        load_image(bomb)
    decode_s = time.perf_counter() - start
    listener = Listener()
    try:
        settings = ServeSettings(workers=1, max_episodes=1, request_timeout_s=3.0, policy="rules",
                                 policies=("rules", f"hang=lm:openai:http://127.0.0.1:{listener.port}/v1|x"))
        with running_app(create_app(Registry.load(t.registry_file), settings)) as url, ThreadPoolExecutor(1) as pool:
            held = pool.submit(chat, url, policy="hang", image=t.image)
            while not httpx.get(f"{url}/healthz").json()["episodes_in_flight"] and not held.done():
                time.sleep(0.02)
            start = time.perf_counter()
            reply = httpx.post(f"{url}/v1/chat/completions", json=bomb_request(bombs), timeout=60)
            refused_s = time.perf_counter() - start
            held_status = held.result().status_code
    finally:
        listener.close()
    return TrustCase("a request of images at the pixel cap while every episode slot is taken",
                     "429 before any image is decoded",
                     reply.status_code == 429 and refused_s < decode_s / 4 and held_status == 504,
                     f"status {reply.status_code} after {refused_s:.2f} s (decoding the images takes {decode_s:.2f} s);"
                     f" the held request ended {held_status}")


def operator_folder_files(t: Target) -> TrustCase:
    """A server with an image directory (`--image-dir`) that holds a 1 GB sparse file and a FIFO: the big file is
    refused (413) without being read, the FIFO is refused at once like a missing file (a read would block a worker
    past the request timeout), and a path outside the directory gets that same refusal."""
    folder = t.folder / "operator-images"
    folder.mkdir(exist_ok=True)
    sparse, fifo = folder / "huge.png", folder / "pipe.png"
    with sparse.open("wb") as fh:
        fh.truncate(SPARSE_FILE_BYTES)
    if not fifo.exists():
        os.mkfifo(fifo)
    settings = ServeSettings(workers=1, request_timeout_s=10.0, image_dirs=(folder,))
    with running_app(create_app(Registry.load(t.registry_file), settings)) as url:  # in this process: its RSS
        try:
            _, grown, huge = peak_rss_growth_mb(os.getpid(), lambda: chat(url, image=str(sparse), timeout=30))
            start = time.perf_counter()
            pipe = chat(url, image=str(fifo), timeout=30)
            pipe_s = time.perf_counter() - start
            missing, outside = chat(url, image=str(folder / "no-such.png")), chat(url, image="/etc/passwd")
        finally:
            with contextlib.suppress(OSError):  # a reader blocked on the FIFO (the fault this checks) gets its EOF
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    refusals = {r.json().get("error", {}).get("message") for r in (pipe, missing, outside)}
    same = len(refusals) == 1 and {r.status_code for r in (pipe, missing, outside)} == {400}
    return TrustCase("a 1 GB sparse file and a FIFO in the operator's image directory",
                     "refused without reading, at once; the FIFO refused like a missing file",
                     huge.status_code == 413 and grown < FILE_MEMORY_LIMIT_MB and same and pipe_s < 5,
                     f"sparse file: {huge.status_code}, RSS {grown:+.0f} MB; FIFO: {pipe.status_code} after "
                     f"{pipe_s:.1f} s; {len(refusals)} distinct refusals for FIFO, missing and outside")


def front_matter_bomb(t: Target) -> TrustCase:
    """A skill folder whose SKILL.md front matter holds a YAML alias bomb (seven levels of nine aliases: five million
    strings, some 30 MB as text) in a metadata value: loading the registry refuses it in moments, with a short
    message naming the file."""
    skills = t.folder / "bomb-skills"
    skill = skills / "bomb"
    skill.mkdir(parents=True, exist_ok=True)
    levels = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(6)]
    (skill / "SKILL.md").write_text("---\nname: bomb\ndescription: A skill whose front matter is a bomb.\nx-levels:\n"
                                    + "\n".join(f"  {level}" for level in levels) + "\nmetadata: {tier: '1', requires: "
                                    "ocr, entry: 'skill.py:run', bomb: *g}\n---\nBody.\n")
    (skill / "skill.py").write_text("def run(ctx):\n    return None\n")
    registry_file = t.folder / "bomb-registry.yaml"
    config = yaml.safe_load(t.registry_file.read_text())
    registry_file.write_text(yaml.safe_dump({**config, "skill_dirs": [str(skills)]}))
    outcome: list[str] = []

    def load() -> None:
        try:
            Registry.load(registry_file)
            outcome.append("loaded")
        except ConfigError as exc:  # SkillError is one
            outcome.append(str(exc))

    loader = threading.Thread(target=load, daemon=True)  # the fault this checks would hold it for minutes
    start = time.perf_counter()
    loader.start()
    loader.join(FRONT_MATTER_LIMIT_S * 5)
    took = time.perf_counter() - start
    message = outcome[0] if outcome else ""
    return TrustCase("a SKILL.md whose front matter is a YAML alias bomb", "refused at once with a short message",
                     took < FRONT_MATTER_LIMIT_S and "SKILL.md" in message
                     and len(message) < FRONT_MATTER_MESSAGE_CHARS,
                     f"{'refused' if message and message != 'loaded' else message or 'still loading'} "
                     f"after {took:.2f} s with {len(message):,} characters: {message[:120]!r}")


IMAGE_CHECKS: tuple[Callable[[Target], TrustCase], ...] = (
    state_written_images, image_memory, cap_before_decoding, operator_folder_files, front_matter_bomb,
)
"""The checks of this block, in TRUST_CHECKS."""

