"""The trust suite's checks of what a client sends and what an operator's files hold: a body no valid request
resembles (nested past the JSON depth cap, options of megabytes, an integer longer than Python converts) is refused
at once in the route's JSON error shape; a LangServe batch or stream that is refused starts no episode and leaves
none running; a `Command` writing a wrong type into a field a node reads ends the run with
the typed input error; operator YAML cannot exhaust the stack or the memory; a question of only invisible
characters is blank."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import yaml

from ...core.question_text import EMPTY_QUESTION
from ...episode.graph import build_graph
from ...errors import ConfigError
from ...images.sources import ImageSources
from ...registry import Registry
from .target import (
    JSON_BODY,
    LANGSERVE_MISSING,
    QUESTION,
    Target,
    TrustCase,
    answer_of,
    chat,
    error_code,
    langserve_mounted,
    post_timed,
)

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

__all__ = ["HTTP_DOOR_CHECKS", "INPUT_AND_FILE_CHECKS"]

REFUSAL_LIMIT_S = 2.0
"""How long refusing a hostile body may take (before: 16 s to echo two 5 MB options)."""
IDLE_LIMIT_S = 1.0
"""How soon a refused batch must leave no episode in flight."""


def hostile_bodies(t: Target) -> TrustCase:
    """JSON nested 100,000 deep (a RecursionError, so a 500, before) and two 5 MB options, on the OpenAI route
    and LangServe's /invoke and /stream where mounted."""
    nested = "[" * 100_000 + "]" * 100_000
    nested_chat = f'{{"model": "maestro", "messages": [{{"role": "user", "content": {nested}}}]}}'.encode()
    options = {"model": "maestro", "choices": ["x" * 5_000_000] * 2,
               "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION},
                                                         {"type": "image_url", "image_url": {"url": t.image}}]}]}
    sent = {"openai nested": post_timed(t.url, "/v1/chat/completions", content=nested_chat, headers=JSON_BODY),
            "openai options": post_timed(t.url, "/v1/chat/completions", json=options)}
    if langserve_mounted(t.url):
        nested_input = f'{{"input": {nested}}}'.encode()
        sent["langserve nested"] = post_timed(t.url, "/maestro/invoke", content=nested_input, headers=JSON_BODY)
        sent["langserve nested stream"] = post_timed(t.url, "/maestro/stream", content=nested_input, headers=JSON_BODY)
        sent["langserve options"] = post_timed(t.url, "/maestro/invoke", json={"input": {
            "question": QUESTION, "images": [t.image], "choices": options["choices"]}})
    slowest = max(took for _, took in sent.values())
    ok = all(r.status_code == 400 and error_code(r) for r, _ in sent.values()) and slowest < REFUSAL_LIMIT_S
    return TrustCase("JSON nested 100,000 deep; two 5 MB options", f"a 400 JSON error within {REFUSAL_LIMIT_S:g} s",
                     ok, ", ".join(f"{name}: {r.status_code} {error_code(r)}" for name, (r, _) in sent.items())
                     + f"; slowest {slowest:.2f} s")


def refused_batch(t: Target) -> TrustCase:
    """A LangServe batch above the episode cap (100 inputs: 64 episodes kept running before, and the next client
    got a 429), a batch with one refused image, and a stream with a refused policy (a torn chunked response
    before): each is refused with a JSON error, no episode is left in flight, and the next request is answered."""
    attack, must = "LangServe batch over the cap; refused stream", f"JSON 4xx; 0 in flight within {IDLE_LIMIT_S:g} s"
    if not langserve_mounted(t.url):
        return TrustCase(attack, must, False, LANGSERVE_MISSING, skipped=LANGSERVE_MISSING)
    good = {"question": QUESTION, "images": [t.image]}
    attempts = {
        "batch of 100": ("/maestro/batch", {"inputs": [good] * 100}),
        "batch with a refused image": ("/maestro/batch",
                                       {"inputs": [good] * 3 + [{**good, "images": ["/etc/passwd"]}]}),
        "stream with a refused policy": ("/maestro/stream", {"input": {**good, "policy": "neural:/etc/passwd"}}),
    }
    details, ok = [], True
    for name, (path, body) in attempts.items():
        reply, _ = post_timed(t.url, path, json=body)
        start = time.perf_counter()
        while (busy := httpx.get(f"{t.url}/healthz", timeout=30).json()["episodes_in_flight"]) and \
                time.perf_counter() - start < 5:
            time.sleep(0.02)
        idle = time.perf_counter() - start
        ok = ok and 400 <= reply.status_code < 500 and error_code(reply) is not None and not busy \
            and idle < IDLE_LIMIT_S
        details.append(f"{name}: {reply.status_code} {error_code(reply)}, idle after {idle:.2f} s")
    answered = answer_of(chat(t.url, image=t.image))
    return TrustCase(attack, must, ok and answered == "Wikipedia",
                     "; ".join(details) + f"; next request answered {answered!r}")


def many_options(t: Target) -> TrustCase:
    """30 options (the 28th was labelled with a backslash, so the scoring regex crashed the episode: a 500): the
    options past Z keep labels that stay labels, and the right one is answered."""
    options = [f"Option {i}" for i in range(29)] + ["Wikipedia"]
    body = {"model": "maestro", "choices": options,
            "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION},
                                                      {"type": "image_url", "image_url": {"url": t.image}}]}]}
    reply, _ = post_timed(t.url, "/v1/chat/completions", json=body)
    answered = answer_of(reply)
    return TrustCase("a question with 30 options", "answered, with the right option",
                     answered in ("Wikipedia", "AD"), f"{reply.status_code}: {answered!r}")


def bad_contexts(t: Target) -> TrustCase:
    """Run contexts of the wrong type or out of bounds, as an Agent Server client sends them (a TypeError inside the
    run before, and any `max_turns` accepted): each ends at intake with the typed input error naming the field,
    before any expert is called."""
    graph = build_graph(Registry.load(t.registry_file), image_sources=ImageSources())
    contexts = [{"max_turns": "lots"}, {"policy": 123}, {"max_turns": 10**9}, {"max_cost": -1}]
    outcomes = [graph.invoke({"question": QUESTION, "images": [t.image]}, context=c) for c in contexts]
    typed = [str(o["stop_reason"]).startswith("input error") and not o.get("steps") for o in outcomes]
    return TrustCase("run contexts of the wrong type or out of bounds", "the typed input error, no expert called",
                     all(typed), "; ".join(f"{c}: {str(o['stop_reason'])[:120]}" for c, o in zip(contexts, outcomes)))


HTTP_DOOR_CHECKS: tuple[Callable[[Target], TrustCase], ...] = (hostile_bodies, refused_batch, many_options,
                                                                bad_contexts)
"""The checks of this block, in TRUST_CHECKS."""


# == Long integers, state written by a Command, operator YAML =====================================================
# An integer longer than Python converts was a 500 on every route; a Command writing a wrong type into a field a
# node reads ended the run with an untyped error; operator YAML could exhaust the stack (nesting), the memory (a
# huge SKILL.md read whole, an alias bomb in a registry file).

LONG_DIGITS = 4301
"""One digit more than Python converts to an int by default (`sys.get_int_max_str_digits()`)."""
OPERATOR_FILE_LIMIT_S = 2.0
"""How long refusing each hostile operator file may take."""


def long_integers(t: Target) -> TrustCase:
    """A body holding an integer of LONG_DIGITS digits, on the OpenAI route and LangServe's /invoke, /batch and
    /stream where mounted: a 400 naming it."""
    huge = "9" * LONG_DIGITS
    question = f'"{QUESTION}"'
    sent = {"openai": post_timed(t.url, "/v1/chat/completions", headers=JSON_BODY, content=(
        f'{{"model": "maestro", "max_turns": {huge}, "messages": [{{"role": "user", "content": {question}}}]}}'
    ).encode())}
    if langserve_mounted(t.url):
        single = f'{{"input": {{"question": {question}, "images": [], "max_turns": {huge}}}}}'.encode()
        sent["langserve invoke"] = post_timed(t.url, "/maestro/invoke", content=single, headers=JSON_BODY)
        sent["langserve stream"] = post_timed(t.url, "/maestro/stream", content=single, headers=JSON_BODY)
        sent["langserve batch"] = post_timed(t.url, "/maestro/batch", headers=JSON_BODY, content=(
            f'{{"inputs": [{{"question": {question}, "images": [], "extra": [{huge}]}}]}}').encode())
    ok = all(r.status_code == 400 and error_code(r) == "integer_too_long" for r, _ in sent.values())
    return TrustCase(f"an integer of {LONG_DIGITS:,} digits in a body", "a 400 `integer_too_long` on every route", ok,
                     ", ".join(f"{name}: {r.status_code} {error_code(r)}" for name, (r, _) in sent.items()))


def state_written_junk(t: Target) -> TrustCase:
    """Commands on an answered thread of the Agent Server graph that write a wrong type into a field a node reads
    and jump to that node (`stop: "bogus"`, junk `steps`), or send a skill node a wrong call (`"x"`): each run ends
    with the typed input error naming the field, or is refused before it starts (`BadRunInput` naming the field: a
    write that is not a list where the state keeps a list), and the thread answers its next question."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command, Send

    graph = build_graph(Registry.load(t.registry_file), image_sources=ImageSources(), checkpointer=InMemorySaver())
    commands = {"state.stop": Command(goto="answer", update={"stop": "bogus"}),
                "call": Command(goto=Send("barcode-reading", "x")),
                "state.steps": Command(goto="router", update={"steps": [{"junk": 1}]}),
                "state.steps text": Command(goto="answer", update={"steps": "x"})}
    asked = {"question": QUESTION, "images": [t.image]}
    config: RunnableConfig = {"configurable": {"thread_id": "junk"}}
    context = {"policy": "rules"}
    graph.invoke(asked, config, context=context)
    outcomes = {}
    for name, command in commands.items():
        try:
            outcomes[name] = str(graph.invoke(command, config, context=context).get("stop_reason"))
        except Exception as exc:  # the untyped error this check looks for: recorded as the outcome
            outcomes[name] = f"{exc.__class__.__name__}: {exc}"
    after = graph.invoke(asked, config, context=context).get("answer")
    ok = after == "Wikipedia" and all(_typed(name.split()[0], reason) for name, reason in outcomes.items())
    return TrustCase("a Command that writes a wrong type into the state", "the typed input error naming the field",
                     ok, "; ".join(f"{name}: {reason[:90]!r}" for name, reason in outcomes.items())
                     + f"; the next question answered {after!r}")


def _typed(field: str, outcome: str) -> bool:
    """Whether a run's outcome is the typed refusal of `field`: its input error, or BadRunInput before the run."""
    return outcome.startswith(f"input error: {field}") or (
        outcome.startswith("BadRunInput: ") and field.split(".")[-1] in outcome)


def operator_yaml(t: Target) -> TrustCase:
    """Operator files that took a process down: SKILL.md front matter nested 8,000 levels (a RecursionError), a
    300 MB SKILL.md (read whole: 841 MB), an alias bomb in a registry YAML (6 GB in 60 s): each is a ConfigError
    naming the file, within OPERATOR_FILE_LIMIT_S."""
    root = t.folder / "operator-yaml"
    front = "name: {name}\ndescription: A hostile skill.\nmetadata: {{tier: '1', requires: ocr, entry: 'skill.py:run'}}"
    files = {}
    for name, extra in (("nested", "\nx: " + "[" * 8000 + "]" * 8000), ("huge", "")):
        skill = root / "skills" / name
        skill.mkdir(parents=True, exist_ok=True)
        (skill / "skill.py").write_text("def run(ctx):\n    return None\n")
        (skill / "SKILL.md").write_text(f"---\n{front.format(name=name)}{extra}\n---\nBody.\n")
        files[name] = root / f"{name}-registry.yaml"
        files[name].write_text(yaml.safe_dump({"extends": "default", "skill_dirs": [str(skill.parent)],
                                               "skills": [name]}))
    with (root / "skills" / "huge" / "SKILL.md").open("r+b") as fh:
        fh.truncate(300_000_000)  # 300 MB that take no disk
    levels = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(6)]
    files["alias bomb"] = root / "bomb-registry.yaml"
    files["alias bomb"].write_text("extends: default\nx:\n" + "\n".join(f"  {v}" for v in levels) + "\nmodels: *g\n")
    outcomes = {}
    for name, registry_file in files.items():
        outcome: list[str] = []

        def load(path: Path, outcome: list[str]) -> None:  # its own list: a loader left running writes there
            try:
                Registry.load(path)
                outcome.append("loaded")
            except ConfigError as exc:
                outcome.append(f"ConfigError: {exc}")
            except BaseException as exc:  # the untyped failure this check looks for: recorded as the outcome
                outcome.append(f"{exc.__class__.__name__}: {str(exc)[:200]}")

        # a daemon: the faults this checks would hold it for minutes
        loader = threading.Thread(target=load, args=(registry_file, outcome), daemon=True)
        start = time.perf_counter()
        loader.start()
        loader.join(OPERATOR_FILE_LIMIT_S * 5)
        outcomes[name] = (outcome[0] if outcome else "still loading", time.perf_counter() - start)
    ok = all(message.startswith("ConfigError: file ") and "\n" not in message and took < OPERATOR_FILE_LIMIT_S
             for message, took in outcomes.values())
    return TrustCase("SKILL.md nested 8,000 deep or of 300 MB; an alias bomb in a registry YAML",
                     f"a one-line ConfigError within {OPERATOR_FILE_LIMIT_S:g} s",
                     ok, "; ".join(f"{name}: {message[:110]!r} after {took:.2f} s"
                                   for name, (message, took) in outcomes.items()))


INVISIBLE = "\u200b\u2060\u3164\u200d\u180e"
"""Zero-width space, word joiner, Hangul filler, zero-width joiner, Mongolian vowel separator: a question of only
these is blank."""


def invisible_question(t: Target) -> TrustCase:
    """A question of only invisible characters (INVISIBLE), which the chat model answered with 242 characters of
    junk before: refused as blank on every door. The OpenAI route without an image and with one that holds no text
    to read the question from: a 400 `empty_request`; LangServe's /invoke where mounted (which needs an image): no
    answer, the empty-question stop; the Agent Server graph: the typed input error, with and without the image."""
    def openai(content: str | list) -> tuple[str, bool]:
        reply = httpx.post(f"{t.url}/v1/chat/completions", timeout=60, json={
            "model": "maestro", "messages": [{"role": "user", "content": content}]})
        return f"{reply.status_code} {error_code(reply)}", reply.status_code == 400 and \
            error_code(reply) == "empty_request" and EMPTY_QUESTION in reply.text

    outcomes = {"openai": openai(INVISIBLE), "openai with image": openai(
        [{"type": "text", "text": INVISIBLE}, {"type": "image_url", "image_url": {"url": t.image}}])}
    if langserve_mounted(t.url):
        reply = httpx.post(f"{t.url}/maestro/invoke", timeout=60,
                           json={"input": {"question": INVISIBLE, "images": [t.image]}})
        output = reply.json().get("output", {}) if reply.status_code == 200 else {}
        stop = str(output.get("stop_reason"))
        outcomes["langserve invoke"] = (f"{reply.status_code} {stop[:60]!r}", output.get("answer") is None
                                        and stop.startswith(f"input error: {EMPTY_QUESTION}"))
    graph = build_graph(Registry.load(t.registry_file), image_sources=ImageSources())
    for name, images in (("agent server graph", []), ("agent server graph with image", [t.image])):
        out = graph.invoke({"question": INVISIBLE, "images": images})
        stop = str(out.get("stop_reason"))
        blank = out.get("answer") is None and stop.startswith(f"input error: {EMPTY_QUESTION}")
        outcomes[name] = (repr(stop[:60]), blank)
    return TrustCase("a question of only invisible characters (U+200B U+2060 U+3164 U+200D U+180E)",
                     "refused as blank on every door", all(ok for _, ok in outcomes.values()),
                     "; ".join(f"{name}: {said}" for name, (said, _) in outcomes.items()))


INPUT_AND_FILE_CHECKS: tuple[Callable[[Target], TrustCase], ...] = (long_integers, state_written_junk, operator_yaml,
                                                                     invisible_question)
"""The checks of this block, in TRUST_CHECKS."""

