"""The trust suite's checks of what a conversation holds: an image resent with every question is stored
once in a SQLite thread, a chat history is held to the per-request limits and the deadline (and, in
CONVERSATION_CHECKS, the Agent Server's run input is typed: `agent_input`). The tests of these
features (tests/test_thread_images.py, tests/test_history_caps.py) run the same scenarios and judge them by the
same rules, so `maestro reliability` catches what they catch, on the installation it runs on."""

from __future__ import annotations

import base64
import io
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from PIL import Image

from ...core.bundled import bundled_dir
from ...doors.serve import ServeSettings, create_app
from ...doors.serve.loopback import running_app
from ...registry import Registry
from .agent_input import agent_server_input
from .target import Target, TrustCase
from .traffic import SHAPES_POLICY, Trickler

__all__ = ["MB", "RESENT_QUESTIONS", "ONE_THREAD_LIMIT_BYTES", "NEW_THREADS_LIMIT_BYTES", "big_png_url",
           "sqlite_bytes", "ResentImageGrowth", "resent_image_growth", "resent_image_storage", "HISTORY_MAX_IMAGES",
           "HISTORY_MAX_MESSAGES", "COUNT_QUESTION", "shifted_circles_url", "history_turns", "HistoryCase",
           "history_cases", "history_problem", "history_caps", "CONVERSATION_CHECKS"]

MB = 1_000_000
RESENT_QUESTIONS = 20
"""Questions on one thread, then new threads, each resending the same image."""
ONE_THREAD_LIMIT_BYTES = 2 * MB
"""What RESENT_QUESTIONS questions on one thread may add to the SQLite file: the image once (1.44 MB as a data URL)
and the questions' checkpoints."""
NEW_THREADS_LIMIT_BYTES = 25 * MB
"""What RESENT_QUESTIONS new threads with the same image may add (1.2 MB a thread at most)."""
COUNT_QUESTION = "How many circles are in the image?"
EXAMPLE_CIRCLES = 7
"""The circles of the bundled examples/circles.png, which every image of these checks is made from."""


def big_png_url(shift: int = 0) -> str:
    """The example circles at 600x600, moved `shift` pixels right, as an uncompressed PNG data URL: a 1.08 MB image
    that is quick to count."""
    image = Image.open(bundled_dir("examples") / "circles.png").convert("RGB").resize((600, 600))
    if shift:
        image = image.rotate(0, translate=(shift, 0), fillcolor=(255, 255, 255))
    out = io.BytesIO()
    image.save(out, "PNG", compress_level=0)
    return f"data:image/png;base64,{base64.b64encode(out.getvalue()).decode()}"


def sqlite_bytes(db: Path) -> int:
    """A SQLite database's bytes on disk: the file and its write-ahead log."""
    return sum(p.stat().st_size for p in (db, db.with_name(db.name + "-wal")) if p.exists())


def _user(text: str, image: str | None = None) -> dict:
    parts: list[dict] = [{"type": "text", "text": text}]
    return {"role": "user", "content": parts + ([{"type": "image_url", "image_url": {"url": image}}] if image else [])}


@dataclass(frozen=True)
class ResentImageGrowth:
    """What resending one image did to a SQLite checkpoint database."""

    one_thread: int
    """Bytes RESENT_QUESTIONS questions on one thread added, from an empty file."""
    new_threads: int
    """Bytes RESENT_QUESTIONS new threads added after that."""
    wrong_answers: list[str]
    """The questions answered otherwise than the image says."""
    stored_images: int
    """Rows of the thread image store."""
    data_url_blobs: int
    """Checkpoints and pending writes that hold an image's bytes (a `data:image` URL)."""

    @property
    def problems(self) -> list[str]:
        return [problem for problem, broken in (
            (f"one thread grew the file by {self.one_thread:,} bytes (limit {ONE_THREAD_LIMIT_BYTES:,})",
             self.one_thread > ONE_THREAD_LIMIT_BYTES),
            (f"new threads grew the file by {self.new_threads:,} bytes (limit {NEW_THREADS_LIMIT_BYTES:,})",
             self.new_threads > NEW_THREADS_LIMIT_BYTES),
            (f"wrong answers: {self.wrong_answers[:3]}", bool(self.wrong_answers)),
            (f"{self.stored_images} images stored, not 1", self.stored_images != 1),
            (f"{self.data_url_blobs} checkpoints or writes hold a data URL", self.data_url_blobs > 0))
            if broken]


def resent_image_growth(registry: Registry, db: Path, questions: int = RESENT_QUESTIONS) -> ResentImageGrowth:
    """`questions` questions on one thread, then as many new threads, each resending one 1.08 MB PNG, to a loopback
    `maestro serve --checkpoint-db db` (SQLite) whose policy counts circles: how the file grew and what it holds."""
    settings = ServeSettings(checkpoint_db=db, policy="shapes", policies=(SHAPES_POLICY,), max_body_bytes=30 * MB,
                             max_image_bytes=2 * MB, request_timeout_s=120)
    image, wrong = big_png_url(), []
    with running_app(create_app(registry, settings)) as url, httpx.Client(base_url=url, timeout=120) as client:
        def ask(question: str, expected: str, thread: str | None = None) -> None:
            body = {"model": "maestro", "messages": [_user(question, image)]}
            reply = client.post("/v1/chat/completions", json=body | ({"thread_id": thread} if thread else {}))
            answer = reply.json()["choices"][0]["message"]["content"] if reply.status_code == 200 else reply.text
            if answer != expected:
                wrong.append(f"{question} {answer[:80]!r}")

        empty = sqlite_bytes(db)
        ask(COUNT_QUESTION, str(EXAMPLE_CIRCLES), "one")
        for n in range(1, questions):
            ask(f"Are there more than {n} circles?", "Yes" if n < EXAMPLE_CIRCLES else "No", "one")
        one_thread = sqlite_bytes(db) - empty
        for _ in range(questions):
            ask(COUNT_QUESTION, str(EXAMPLE_CIRCLES))
        new_threads = sqlite_bytes(db) - empty - one_thread
    with sqlite3.connect(db) as conn:
        (stored,) = conn.execute("SELECT count(*) FROM store").fetchone()
        blobs = [bytes(r[0]) for r in conn.execute("SELECT checkpoint FROM checkpoints")]
        blobs += [bytes(r[0]) for r in conn.execute("SELECT value FROM writes")]
    return ResentImageGrowth(one_thread, new_threads, wrong, stored, sum(b"data:image" in blob for blob in blobs))


def resent_image_storage(t: Target) -> TrustCase:
    """`resent_image_growth` on a new SQLite file (an image stored with every checkpoint grew it 15 MB over 20
    questions)."""
    growth = resent_image_growth(Registry.load(t.registry_file), t.folder / f"resent-{time.monotonic_ns()}.sqlite")
    return TrustCase(f"{RESENT_QUESTIONS} questions on one SQLite thread, then {RESENT_QUESTIONS} new threads, each "
                     "resending a 1.08 MB PNG", f"one thread grows the file at most {ONE_THREAD_LIMIT_BYTES / MB:g} "
                     f"MB, the new threads {NEW_THREADS_LIMIT_BYTES / MB:g} MB; the image stored once",
                     not growth.problems, f"one thread {growth.one_thread:+,} bytes, new threads "
                     f"{growth.new_threads:+,}, {growth.stored_images} image stored"
                     + "".join(f"; {p}" for p in growth.problems))


# -- a chat history held to the request's limits ---------------------------------------------------------------------
HISTORY_MAX_IMAGES = 4
HISTORY_MAX_MESSAGES = 40
"""The `max_images` and `max_messages` of the servers the history cases are sent to."""


def shifted_circles_url(turn: int) -> str:
    """The example circles, moved `turn` pixels right: a different image for each turn."""
    image = Image.open(bundled_dir("examples") / "circles.png").convert("RGB")
    image = image.rotate(0, translate=(turn, 0), fillcolor="white")
    out = io.BytesIO()
    image.save(out, "PNG")
    return f"data:image/png;base64,{base64.b64encode(out.getvalue()).decode()}"


def history_turns(images: list[str]) -> list[dict]:
    """A chat history of one user turn per image, each answered "I do not know."."""
    return [m for i, url in enumerate(images) for m in (
        _user(f"Question {i} about it?", url), {"role": "assistant", "content": "I do not know."})]


@dataclass(frozen=True)
class HistoryCase:
    """A chat request whose history tests a limit, and how the server must answer it."""

    name: str
    messages: list[dict]
    status: int
    code: str | None = None
    """The error code of a refusal."""
    answer: str | None = None
    """The answer of a 200."""
    within_s: float | None = None
    """The most seconds the answer may take."""


def history_cases(late_image_url: str, timeout_s: float, max_images: int = HISTORY_MAX_IMAGES,
                  max_messages: int = HISTORY_MAX_MESSAGES) -> list[HistoryCase]:
    """The history cases for a server with these limits and `late_image_url` allow-listed (a host that
    answers after the deadline): distinct images across the turns count toward `max_images`, an image repeated in
    every turn counts once, the messages are capped, and verifying the history's images is inside the deadline."""
    question = {"role": "user", "content": COUNT_QUESTION}
    distinct = history_turns([shifted_circles_url(turn) for turn in range(max_images + 1)])
    repeated = history_turns([shifted_circles_url(0)] * 8)
    chatter = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}] * (max_messages // 2)
    return [HistoryCase("distinct images across the turns", [*distinct, question], 413, code="too_many_images"),
            HistoryCase("one image repeated in 8 turns", [*repeated, question], 200, answer=str(EXAMPLE_CIRCLES)),
            HistoryCase("too many messages", [*chatter, question], 413, code="too_many_messages"),
            HistoryCase("a history image from a late host", [*history_turns([late_image_url]), question], 504,
                        code="timeout", within_s=timeout_s + 2)]


def history_problem(case: HistoryCase, status: int, code: str | None, answer: str | None,
                    took_s: float) -> str | None:
    """What is wrong with the server's reply to `case` (None: nothing)."""
    if status != case.status or (case.code and code != case.code) or (case.answer and answer != case.answer):
        return f"{case.name}: {status} {code or answer!r}, not {case.status} {case.code or case.answer!r}"
    if case.within_s is not None and took_s > case.within_s:
        return f"{case.name}: answered after {took_s:.1f} s, later than {case.within_s:g} s"
    return None


def history_caps(t: Target) -> TrustCase:
    """`history_cases` against a server of the suite's own with a 10 s deadline and a trickling host allow-listed
    (uncapped, a history of 40 large images was accepted and answered after 503 s)."""
    timeout_s, trickler = 10.0, Trickler()
    host = f"127.0.0.1:{trickler.port}"
    settings = ServeSettings(policy="rules", max_images=HISTORY_MAX_IMAGES, max_messages=HISTORY_MAX_MESSAGES,
                             request_timeout_s=timeout_s, allowed_image_hosts=(host,), fetch_timeout_s=60)
    problems, seen = [], []
    try:
        with running_app(create_app(Registry.load(t.registry_file), settings)) as url:
            for case in history_cases(f"http://{host}/circles.png", timeout_s):
                start = time.monotonic()
                reply = httpx.post(f"{url}/v1/chat/completions", timeout=60,
                                   json={"model": "maestro", "messages": case.messages})
                took, body = time.monotonic() - start, reply.json()
                code = body.get("error", {}).get("code") if reply.status_code != 200 else None
                answer = body["choices"][0]["message"]["content"] if reply.status_code == 200 else None
                seen.append(f"{case.name}: {reply.status_code} in {took:.1f} s")
                problems.append(history_problem(case, reply.status_code, code, answer, took))
    finally:
        trickler.close()
    failed = [p for p in problems if p]
    return TrustCase("chat histories past the image and message caps, and one whose image arrives late",
                     f"413 too_many_images and too_many_messages, a repeated image counted once, 504 within "
                     f"{timeout_s + 2:g} s of a {timeout_s:g} s deadline", not failed, "; ".join(failed or seen))


CONVERSATION_CHECKS = (resent_image_storage, history_caps, agent_server_input)
"""The checks of what a conversation holds (this module's, and the Agent Server's run input), which `maestro
reliability` runs after the trust suite's TRUST_CHECKS."""
