"""The trust suite's check that large images sent at once are admitted, not refused: a served
episode holds its working set in the process's image memory budget (`images.load.working_set_bytes`), so episodes
on large images take turns instead of adding up, and the requests wait for their turn within their deadline rather
than being refused 503 or answered empty. tests/test_working_set.py runs the same scenario and judges it by the same
rule, so `maestro reliability` catches what it catches, on the installation it runs on."""

from __future__ import annotations

import base64
import io
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
from PIL import Image, ImageDraw

from ...doors.serve import ServeSettings, create_app
from ...doors.serve.loopback import running_app
from ...images.load import DECODE_MEMORY, working_set_bytes
from ...registry import Registry
from .registries import fault_registry
from .target import Target, TrustCase, peak_rss_growth_mb
from .traffic import SHAPES_POLICY

__all__ = ["ADMITTED_REQUESTS", "ADMITTED_SIDE", "ADMITTED_CIRCLES", "ADMITTED_MEMORY_LIMIT_MB", "ADMITTED_TIMEOUT_S",
           "ADMITTED_CALL_TIMEOUT_S", "admitted_image_url", "admitted_request", "admitted_problem",
           "admitted_large_images", "ADMISSION_CHECKS"]

ADMITTED_REQUESTS = 4
"""Requests sent at once, each of one large image."""
ADMITTED_SIDE = 2400
"""The image's side: 5.8 megapixels, decoded whole, whose working set (one OCR call at its 2000-pixel bound
included) is above the default budget of 512 MB, so the episodes run one at a time."""
ADMITTED_CIRCLES = 7
ADMITTED_MEMORY_LIMIT_MB = 1024.0
"""What the requests may add to the server's RSS together: the issue's bound for 16 requests at the pixel cap."""
ADMITTED_TIMEOUT_S = 300.0
"""The server's request timeout: every request must be answered within it, after waiting for its turn."""
ADMITTED_CALL_TIMEOUT_S = 60.0
"""The OpenCV analyser's timeout per call (its card's usual 30 s, doubled for a machine under load)."""


def admitted_image_url(side: int = ADMITTED_SIDE) -> str:
    """ADMITTED_CIRCLES circle outlines in a row on white, `side` pixels square, as a PNG data URL."""
    image = Image.new("L", (side, side), 255)
    draw = ImageDraw.Draw(image)
    step = side // (ADMITTED_CIRCLES + 1)
    for i in range(ADMITTED_CIRCLES):
        left = step // 2 + i * step
        draw.ellipse((left, side // 2 - step // 3, left + 2 * step // 3, side // 2 + step // 3), outline=0,
                     width=max(2, side // 400))
    out = io.BytesIO()
    image.save(out, "PNG", optimize=True)
    return f"data:image/png;base64,{base64.b64encode(out.getvalue()).decode()}"


def admitted_request(image: str) -> dict:
    content = [{"type": "text", "text": "How many circles are in the image?"},
               {"type": "image_url", "image_url": {"url": image}}]
    return {"model": "maestro", "messages": [{"role": "user", "content": content}]}


def admitted_problem(statuses: list[int], answers: list[str | None], waited: int, peak: int, limit: int,
                     grown_mb: float) -> str | None:
    """What is wrong with the replies to ADMITTED_REQUESTS requests at once (None: nothing): each must be a 200
    with the right count, at least one episode must have waited for another's working set (they took turns), and
    neither the budget nor the RSS may have gone past its bound."""
    expected = str(ADMITTED_CIRCLES)
    if statuses != [200] * len(statuses) or answers != [expected] * len(answers):
        return f"not every request was answered {expected!r}: {dict(Counter(zip(statuses, answers)))}"
    if not waited:
        return "no episode waited for another's working set: they ran together"
    if peak > limit:
        return f"the image memory budget held {peak:,} bytes, past its limit of {limit:,}"
    if grown_mb > ADMITTED_MEMORY_LIMIT_MB:
        return f"RSS grew {grown_mb:+.0f} MB, past {ADMITTED_MEMORY_LIMIT_MB:g} MB"
    return None


def admitted_large_images(t: Target) -> TrustCase:
    """ADMITTED_REQUESTS requests at once of an ADMITTED_SIDE-pixel image, on a server of the check's own with the
    default image memory budget and two workers, each counting with the OpenCV analyser (`SHAPES_POLICY`) under
    the card's usual timeout (the suite's registry cuts its experts off after 1.5 s)."""
    image = admitted_image_url()
    folder = t.folder / "admission"
    folder.mkdir(parents=True, exist_ok=True)
    registry = Registry.load(fault_registry(folder, None, timeout_s=ADMITTED_CALL_TIMEOUT_S))
    settings = ServeSettings(workers=2, policy="shapes", policies=(SHAPES_POLICY,),
                             request_timeout_s=ADMITTED_TIMEOUT_S)
    with running_app(create_app(registry, settings)) as url:
        waited, DECODE_MEMORY.peak = DECODE_MEMORY.waited, 0
        bodies = [admitted_request(image)] * ADMITTED_REQUESTS
        idle, grown, replies = peak_rss_growth_mb(t.pid, lambda: _post_all(url, bodies), settle_s=1.0)
    statuses = [r.status_code for r in replies]
    answers = [r.json()["choices"][0]["message"]["content"] if r.status_code == 200 else None for r in replies]
    took_turns = DECODE_MEMORY.waited - waited
    problem = admitted_problem(statuses, answers, took_turns, DECODE_MEMORY.peak, DECODE_MEMORY.limit, grown)
    detail = problem or (f"{len(replies)} answered {ADMITTED_CIRCLES}; working set "
                         f"{working_set_bytes([image]) / 1e6:.0f} MB each in a {DECODE_MEMORY.limit / 1e6:.0f} MB "
                         f"budget, {took_turns} waits; RSS peak {grown:+.0f} MB over {idle:.0f} MB")
    return TrustCase(f"{ADMITTED_REQUESTS} requests at once of a {ADMITTED_SIDE}x{ADMITTED_SIDE} image",
                     f"all admitted and answered {ADMITTED_CIRCLES}, taking turns in the image memory budget, RSS "
                     f"grows under {ADMITTED_MEMORY_LIMIT_MB:g} MB", problem is None, detail)


def _post_all(url: str, bodies: list[dict]) -> list[httpx.Response]:
    """The replies to `bodies` POSTed to the chat route at the same moment."""
    start = threading.Barrier(len(bodies))

    def send(body: dict) -> httpx.Response:
        with httpx.Client(timeout=ADMITTED_TIMEOUT_S + 30) as client:
            start.wait()
            return client.post(f"{url}/v1/chat/completions", json=body)

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(send, bodies))


ADMISSION_CHECKS: tuple[Callable[[Target], TrustCase], ...] = (admitted_large_images,)
"""The checks of admission under memory, which `maestro reliability` runs after the conversation checks."""
