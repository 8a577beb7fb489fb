"""A served episode holds an estimate of its whole working set (the largest decode of its images
and what its experts hold per decoded pixel) in the process's image memory budget while it runs, the budget the
doors' decodes hold too, so episodes on large images take turns with each other and with decoding instead of
adding up; the episode's own decodes, on whatever thread they run, are inside its reservation."""

from __future__ import annotations

import base64
import contextvars
import io
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from PIL import Image
from servers import EXAMPLES, data_url, slow_registry

from maestro_graph.core.shared_budget import SharedBudget
from maestro_graph.doors.serve import ServeSettings, create_app
from maestro_graph.doors.serve.loopback import running_app
from maestro_graph.images.load import (
    DECODE_MEMORY,
    MAX_DECODED_PIXELS,
    OCR_BYTES_PER_PIXEL,
    OCR_PIXELS,
    WORKING_BYTES_PER_PIXEL,
    decode_bytes,
    load_image,
    working_set_bytes,
)
from maestro_graph.operations.reliability.image_checks import bomb_urls
from maestro_graph.operations.reliability.traffic import SHAPES_POLICY, webp_bomb_url


def _held_within(budget: SharedBudget, units: int, context: contextvars.Context | None, wait_s: float) -> bool:
    """Whether a hold of `units` on another thread (in `context`, or a fresh one) got room within `wait_s`."""
    got = threading.Event()

    def hold() -> None:
        with budget.hold(units, "test"):
            got.set()

    thread = threading.Thread(target=(lambda: context.run(hold)) if context else hold, daemon=True)
    thread.start()
    return got.wait(wait_s)


def test_a_reservation_covers_its_own_holds_and_others_wait_for_it():
    budget = SharedBudget(100, unit="bytes")
    with budget.reserve(80, "episode"):
        with budget.hold(50, "its own decode"):  # 130 > 100: would wait forever without the reservation
            assert budget.used == 80
        assert _held_within(budget, 50, contextvars.copy_context(), 1.0)  # an expert thread it hands work to
        waiting = threading.Event()
        outsider = threading.Thread(target=lambda: waiting.set() if _held_within(budget, 50, None, 5.0) else None)
        outsider.start()
        time.sleep(0.5)
        assert not waiting.is_set()  # another request's decode waits for the episode
    outsider.join()
    assert waiting.is_set() and budget.used == 0 and budget.waited == 1


def _png(side: int) -> str:
    image = Image.open(EXAMPLES / "circles.png").convert("RGB").resize((side, side))
    out = io.BytesIO()
    image.save(out, "PNG")
    return f"data:image/png;base64,{base64.b64encode(out.getvalue()).decode()}"


def test_the_working_set_counts_the_largest_decode_and_every_decoded_pixel():
    webp = webp_bomb_url(bomb_urls(1)[0])
    with Image.open(io.BytesIO(base64.b64decode(webp.partition(",")[2]))) as probe:
        decode = decode_bytes(probe)
        assert probe.size == (6300, 6300)
    ocr = OCR_PIXELS * OCR_BYTES_PER_PIXEL  # one OCR call at its own bound
    assert working_set_bytes([webp]) == decode + MAX_DECODED_PIXELS * WORKING_BYTES_PER_PIXEL + ocr
    assert working_set_bytes([webp, webp]) == decode + 2 * MAX_DECODED_PIXELS * WORKING_BYTES_PER_PIXEL + ocr
    small = working_set_bytes([data_url(EXAMPLES / "circles.png")])
    assert 0 < small < 100_000_000
    assert working_set_bytes(["maestro-image:abc"]) >= decode  # unknown: counted as the worst image


@pytest.fixture()
def image_memory():
    """The process's image memory budget with its peak counted from this test on (earlier tests in the same worker
    held more under the default limit), and its limit given back after the test's server configured it."""
    limit = DECODE_MEMORY.limit
    DECODE_MEMORY.peak = 0
    yield DECODE_MEMORY
    DECODE_MEMORY.configure(limit)


def test_concurrent_episodes_on_large_images_take_turns_and_are_all_answered(registry, image_memory):
    image = _png(600)  # working set 58.7 MB: one episode at a time in a 60 MB budget, and no decode beside it
    assert 58_000_000 < working_set_bytes([image]) < 60_000_000
    settings = ServeSettings(decode_memory_mb=60, workers=2, policy="shapes", policies=(SHAPES_POLICY,),
                             request_timeout_s=120)
    body = {"model": "maestro", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "How many circles are in the image?"},
        {"type": "image_url", "image_url": {"url": image}}]}]}
    with running_app(create_app(registry, settings)) as url:
        waited = image_memory.waited
        with ThreadPoolExecutor(3) as pool:
            replies = list(pool.map(lambda _: httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120),
                                    range(3)))
    assert [r.status_code for r in replies] == [200] * 3  # admitted and answered, not refused
    assert [r.json()["choices"][0]["message"]["content"] for r in replies] == ["7"] * 3
    assert image_memory.waited > waited  # a second episode (or a decode) waited for the first's working set
    assert image_memory.peak <= image_memory.limit and image_memory.used == 0


def test_requests_sending_one_image_at_once_decode_it_once(monkeypatch):
    """The door verifies an image by decoding it; 8 requests of the same new image at once decode it once (the
    others wait for its verdict), so they do not queue behind each other's decodes into 503s."""
    import numpy as np

    import maestro_graph.images.sources as sources

    decodes = []

    def counted(*args, **kwargs):
        decodes.append(args[0][:40])
        time.sleep(0.3)  # a large image's decode: the others arrive while it runs
        return real(*args, **kwargs)

    real = sources.load_image
    monkeypatch.setattr(sources, "load_image", counted)
    rng = np.random.default_rng(int(time.time_ns() % 2**32))  # bytes no earlier test verified
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(out, "PNG")
    url = f"data:image/png;base64,{base64.b64encode(out.getvalue()).decode()}"
    policy = sources.ImageSources()
    with ThreadPoolExecutor(8) as pool:
        verified = list(pool.map(lambda _: policy.resolve([url]), range(8)))
    assert verified == [[url]] * 8 and len(decodes) == 1


def test_a_large_webp_is_decoded_in_a_quarter_of_pillows_memory_and_to_the_same_pixels():
    """A still WebP above the pixel budget is decoded by libwebp into 3 bytes a pixel and reduced a strip at a time
    (some 230 MB at 40 megapixels, where Pillow's WebP decoder held 600 MB), to exactly the pixels Pillow's decode
    and `reduce` give; the estimate the decode holds in the budget says so."""
    import numpy as np

    rng = np.random.default_rng(3)
    pixels = rng.integers(0, 256, (1501, 1203, 3), dtype=np.uint8)  # odd sides: partial blocks at the edges
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "WEBP", quality=60)
    url = f"data:image/webp;base64,{base64.b64encode(out.getvalue()).decode()}"
    for budget, factor in ((400_000, 3), (100_000, 5)):
        with Image.open(io.BytesIO(out.getvalue())) as probe:
            assert decode_bytes(probe, budget) == 1203 * 1501 * 6 < decode_bytes(probe, 2_000_000)
            expected = probe.convert("RGB").reduce(factor)
        image = load_image(url, budget=budget)
        assert image.size == expected.size and np.array_equal(np.asarray(image), np.asarray(expected))
        assert image.info["maestro_source_size"] == (1203, 1501)
    with Image.open(io.BytesIO(out.getvalue())) as probe:  # within the budget: Pillow's own decode, as before
        assert np.array_equal(np.asarray(load_image(url)), np.asarray(probe.convert("RGB")))


def test_the_admission_check_judges_answers_turns_and_bounds():
    """`maestro reliability`'s admission check fails on a refusal or a wrong count, on episodes that never took
    turns, and on a budget or an RSS past its bound."""
    from maestro_graph.operations.reliability.admission import ADMITTED_MEMORY_LIMIT_MB, admitted_problem

    answered = ([200] * 4, ["7"] * 4)
    assert admitted_problem(*answered, waited=2, peak=500, limit=512, grown_mb=300) is None
    assert "not every request" in admitted_problem([200, 200, 503, 200], ["7", "7", None, "7"], 2, 500, 512, 300)
    assert "not every request" in admitted_problem([200] * 4, ["7", "", "7", "7"], 2, 500, 512, 300)
    assert "ran together" in admitted_problem(*answered, waited=0, peak=500, limit=512, grown_mb=300)
    assert "past its limit" in admitted_problem(*answered, waited=2, peak=600, limit=512, grown_mb=300)
    assert "RSS grew" in admitted_problem(*answered, 2, 500, 512, ADMITTED_MEMORY_LIMIT_MB + 1)


@pytest.mark.slow  # about 40 s on two busy cores: four episodes on a 5.8-megapixel image, one after another
def test_maestro_reliability_admits_concurrent_large_images(tmp_path, image_memory):
    import os

    from maestro_graph.operations.reliability.admission import admitted_large_images
    from maestro_graph.operations.reliability.registries import fault_registry
    from maestro_graph.operations.reliability.target import Target

    case = admitted_large_images(Target("", os.getpid(), tmp_path, "", fault_registry(tmp_path, None)))
    assert case.ok, f"{case.attack}: {case.must} did not hold: {case.detail}"


def test_an_expert_call_the_episode_gave_up_on_keeps_its_images_room_until_it_ends(tmp_path):
    """A timed-out expert call cannot be stopped (its thread runs on and holds its copies of the images), so the
    episode's reservation is given back when that call ends, not when the episode gives up on it."""
    from maestro_graph.registry import Registry
    from maestro_graph.types import Invoke

    registry_file = slow_registry(tmp_path, delay_s=1.5)
    text = registry_file.read_text().replace("timeout_s: 120", "timeout_s: 0.3")
    registry_file.write_text(text)
    registry = Registry.load(registry_file, cache=None)
    budget = SharedBudget(100, unit="bytes")
    with budget.reserve(80, "episode"):
        step = registry.run(Invoke("slow-ocr", "text-reading"), question="What does it say?",
                            images=[str(EXAMPLES / "circles.png")])
    assert step.error and "timed out" in step.error
    assert budget.used == 80  # the call runs on after the episode's step gave up on it
    deadline = time.monotonic() + 10
    while budget.used and time.monotonic() < deadline:
        time.sleep(0.05)
    assert budget.used == 0
    with budget.reserve(80, "another episode"):  # nothing abandoned: given back at the block's end
        pass
    assert budget.used == 0
