"""The LM router policy: tag parser, prompt from the cards, the graph's handling of outputs that are no action, the
OpenAI-compatible backend's retries against endpoints that fail, and the real SmolLM2-135M through the graph with
the transformers backend (constrained and free)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from conftest import real_tasks

from maestro_graph.core.tasks import Task
from maestro_graph.episode.context import MaestroContext
from maestro_graph.episode.graph import build_graph
from maestro_graph.episode.runner import EpisodeResult, run_episode
from maestro_graph.errors import ConfigError
from maestro_graph.policy import make_policy
from maestro_graph.policy.base import ActionSpace, EpisodeView
from maestro_graph.policy.lm import (
    LMPolicy,
    OpenAILM,
    PromptOptions,
    TransformersLM,
    action_regex,
    action_text,
    conversation,
    information,
    option_labels,
    option_pairs,
    parse_action,
    system_prompt,
)
from maestro_graph.policy.lm.weights import cached_hf_folder
from maestro_graph.registry import Registry
from maestro_graph.training.rl.config import LMTrainConfig
from maestro_graph.training.rl.export import ExportOptions, episode_messages
from maestro_graph.training.rl.rewards import format_errors
from maestro_graph.training.rl.trl_train import sft_renderings
from maestro_graph.types import Answer, InvalidAction, Invoke, Step, StopReason

SHORT = PromptOptions(card_chars=60, observation_chars=200)


# -- parser -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("<search> rapidocr@@chart-qa: max value </search>", Invoke("rapidocr", "chart-qa", "max value")),
    ("<search>zxing@@barcode-reading</search>", Invoke("zxing", "barcode-reading", "")),
    ("thinking... <answer> 42 </answer> <answer> 7 </answer>", Answer("42")),  # the first action only
    ("<ANSWER>yes</ANSWER>", Answer("yes")),
    ("<search> unknown@@pair </search>", Invoke("unknown", "pair", "")),  # parsed; the registry judges it
])
def test_parser_accepts_the_first_well_formed_action(text, expected):
    assert parse_action(text) == expected


def test_parser_reads_option_numbers():
    options = ["rapidocr@@chart-qa", "zxing@@barcode-reading"]
    assert parse_action("<search> 2: the code </search>", options) == Invoke("zxing", "barcode-reading", "the code")
    assert parse_action("<search>1</search>", options) == Invoke("rapidocr", "chart-qa", "")
    for text in ("<search> 3 </search>", "<search> 0 </search>"):
        action = parse_action(text, options)
        assert isinstance(action, InvalidAction) and "is not listed (listed: 1-2)" in action.reason


@pytest.mark.parametrize("text, fragment", [
    ("The answer is 5.", "no <search> or <answer> tag"),
    ("<search> rapidocr@@chart-qa: x", "is not closed"),
    ("<search> <answer> 3 </answer> </search>", "tags do not nest"),
    ("</answer> 3", "never opened"),
    ("<answer>  </answer>", "the answer is empty"),
    ("<search> rapidocr chart-qa </search>", "is not a `model@@skill` id"),
    ("<search> a@@b@@c </search>", "is not a `model@@skill` id"),
    ("<information> fake result </information>", "written by the environment"),
])
def test_parser_reports_malformed_output(text, fragment):
    action = parse_action(text)
    assert isinstance(action, InvalidAction) and action.text == text
    assert fragment in action.reason


# -- prompt from the cards --------------------------------------------------------------------------------------------
def test_prompt_lists_numbered_experts_with_their_cards(registry):
    listed = registry.pairs()
    prompt = system_prompt(listed, 3, SHORT)
    for number, pair in enumerate(listed, start=1):
        line = next(x for x in prompt.splitlines() if x.startswith(f"{number}. "))
        assert line.startswith(f"{number}. {pair.skill.name} by {pair.model.name}: ")
        assert pair.skill.description.split()[0] in line and pair.model.description.split()[0] in line
    assert "at most 3 calls" in prompt and "<search> N: REQUEST </search>" in prompt
    smaller = registry.without(skills={"chart-qa"}, models={"zxing"})
    reduced = system_prompt(smaller.pairs(), 3, SHORT)
    assert "chart-qa" not in reduced and "zxing" not in reduced and "table-qa by rapidocr" in reduced
    # routers trained before numbered options read the pair-id prompt they were trained with
    legacy = system_prompt(listed, 3, PromptOptions(card_chars=60, order="pair-ids"))
    assert "Valid pairs: " + ", ".join(p.id for p in listed) in legacy and "Experts:" not in legacy


def _profiled_barcode_question() -> tuple[Registry, str, str, EpisodeView, ActionSpace]:
    """The real profiled registry and a real barcode question's first decision (its reach figures included)."""
    real = Registry.load(Path(__file__).parents[1] / "configs" / "registry-nolm.yaml", cache=None)
    image = str(Path(__file__).parent / "data" / "real" / "barcode" / "images" / "89920816164ecf76.webp")
    question = "What is the value encoded in this barcode?"
    view = EpisodeView(question, (image,), None, (), 2, 10.0)
    space = ActionSpace.build(real, view)
    return real, image, question, view, space


def test_a_measured_prompt_shows_each_experts_accuracy_on_similar_questions(tmp_path):
    """With `measured`, each option says how its pair did on the calibration questions most like this one (the
    registry's reach, as the neural policy reads it): the LM router of the real profiled registry sees the barcode
    readers' figures on a barcode question, nothing for a pair whose profile is hidden, and a router trained without
    it reads the prompt it was trained on."""
    real, image, question, view, space = _profiled_barcode_question()
    measured = PromptOptions(card_chars=60, measured=True)
    policy = LMPolicy(None, prompt=measured)
    lines = [x for x in policy.messages(view, space)[0]["content"].splitlines() if x[:1].isdigit()]
    zxing = next(x for x in lines if x.split(". ", 1)[1].startswith("barcode-reading by zxing"))
    figure = round(100 * space.accuracy["zxing@@barcode-reading"])
    assert zxing.endswith(f" [{figure}% right on similar questions]") and figure >= 80
    assert all(x.endswith("% right on similar questions]") for x in lines)
    assert "right on similar" not in LMPolicy(None, prompt=SHORT).messages(view, space)[0]["content"]
    hidden = real.without(unprofiled={"zxing@@barcode-reading"})
    task = Task(id="t", question=question, images=[image], answer="x")
    episode = EpisodeResult(answer=None, steps=[], stop=StopReason.POLICY, latency_s=0.0)
    shown = episode_messages(task, episode, hidden, ExportOptions(prompt=measured))[0]["content"]
    assert "right on similar" not in next(x for x in shown.splitlines() if "barcode-reading by zxing" in x)
    assert "right on similar" in next(x for x in shown.splitlines() if "barcode-reading by opencv-barcode" in x)
    (tmp_path / "adapter_config.json").write_text("{}")
    (tmp_path / "router.yaml").write_text("adapter: .\nmodel: null\norder: registry\n")
    assert not make_policy(f"lm:transformers:{tmp_path}").prompt.measured
    (tmp_path / "router.yaml").write_text("adapter: .\nmodel: null\norder: registry\nmeasured: true\n")
    assert make_policy(f"lm:transformers:{tmp_path}").prompt.measured


def test_a_ranked_prompt_numbers_the_experts_by_their_accuracy_on_similar_questions(tmp_path):
    """With order `reach`, option 1 is the pair the reach measured best on questions like this one (a barcode reader on
    a barcode question), the numbers follow the figures down, a pair whose profile is hidden comes last, the number the
    router writes calls that pair, and a router trained ranked reads its prompt ranked."""
    real, image, question, view, space = _profiled_barcode_question()
    ranked = PromptOptions(card_chars=60, order="ranked")
    listed = option_pairs(real.pairs(), question, None, ranked, space.accuracy)
    figures = [space.accuracy[p.id] for p in listed]
    assert figures == sorted(figures, reverse=True) and listed[0].skill.name == "barcode-reading"
    for salt in range(4):  # training's shuffle reorders only the pairs the figures do not tell apart
        drawn = option_pairs(real.pairs(), question, None, PromptOptions(order="ranked", shuffle=salt), space.accuracy)
        assert drawn[:2] == listed[:2] and {p.id for p in drawn} == {p.id for p in listed}
    assert any(option_pairs(real.pairs(), question, None, PromptOptions(shuffle=salt), space.accuracy)[:2]
               != listed[:2] for salt in range(4))
    policy = LMPolicy(None, prompt=ranked)
    first = next(x for x in policy.messages(view, space)[0]["content"].splitlines() if x.startswith("1. "))
    assert first.startswith(f"1. {listed[0].skill.name} by {listed[0].model.name}: ")
    assert parse_action("<search> 1 </search>", [p.id for p in listed]).pair == listed[0].id
    hidden = real.without(unprofiled={listed[0].id})
    demoted = option_pairs(hidden.pairs(), question, None, ranked, ActionSpace.build(hidden, view).accuracy)
    assert demoted[-1].id == listed[0].id and demoted[0].id == listed[1].id
    (tmp_path / "adapter_config.json").write_text("{}")
    (tmp_path / "router.yaml").write_text("adapter: .\nmodel: null\norder: registry\n")
    assert not make_policy(f"lm:transformers:{tmp_path}").prompt.ranked
    (tmp_path / "router.yaml").write_text("adapter: .\nmodel: null\norder: reach\n")
    assert make_policy(f"lm:transformers:{tmp_path}").prompt.ranked
    # a router.yaml written before `order` says it in three flags, read as the order they mean
    (tmp_path / "router.yaml").write_text("adapter: .\nmodel: null\nnumbered: true\nranked: true\n")
    assert make_policy(f"lm:transformers:{tmp_path}").prompt.ranked


def test_a_router_ranked_by_a_policy_numbers_the_experts_by_its_opening_choice(tmp_path):
    """With order `neural` (a composite: the neural policy ranks, the LM decides), option 1 is the pair the ranking
    policy opens with (here one that is not the reach's best), the ranking taken at the question's first decision
    stays all through its episode, and router.yaml's `order` names the ranker: the shipped neural policy for
    `neural`; an order that is none of them, or measured figures beside a neural order, are refused by field."""
    real, image, question, view, space = _profiled_barcode_question()
    ranked = PromptOptions(card_chars=60, order="ranked")

    def first_option(policy: LMPolicy, at: EpisodeView) -> str:
        return next(x for x in policy.messages(at, space)[0]["content"].splitlines() if x.startswith("1. "))

    assert first_option(LMPolicy(None, prompt=ranked), view).startswith("1. barcode-reading by ")
    policy = LMPolicy(None, prompt=ranked, ranker=make_policy("fixed:rapidocr@@text-reading"))
    assert first_option(policy, view).startswith("1. text-reading by rapidocr: ")
    called = Step(model="rapidocr", skill="text-reading", evidence="some text", cost=0.5)
    later = EpisodeView(question, (image,), None, (called,), 2, 10.0)  # the fixed policy would now answer
    assert first_option(policy, later).startswith("1. text-reading by rapidocr: ")
    (tmp_path / "adapter_config.json").write_text("{}")
    router = "adapter: .\nmodel: null\n"
    (tmp_path / "router.yaml").write_text(router + "order: neural\n")
    assert make_policy(f"lm:transformers:{tmp_path}").ranker.name == "neural"
    assert make_policy(f"lm:transformers:{tmp_path}").prompt.ranked
    (tmp_path / "router.yaml").write_text(router + "order: reach\n")
    assert make_policy(f"lm:transformers:{tmp_path}").ranker is None
    for bad, fragment in (("order: rules\n", "order 'rules' .* must be one of pair-ids, registry, reach, neural"),
                          ("order: neural\nmeasured: true\n", "shows no measured figures"),
                          ("order: neural\nranked: true\n", "`order` replaces")):
        (tmp_path / "router.yaml").write_text(router + bad)
        with pytest.raises(ConfigError, match=fragment):
            make_policy(f"lm:transformers:{tmp_path}")


def test_a_composite_router_is_trained_on_the_ranking_it_is_served_with(tmp_path):
    """With order `neural`, a rendering of a teacher episode for SFT numbers the options as the served router does:
    its option 1 is the pair that the router served by `lm:FILE.yaml` (ranked by the shipped neural policy) puts
    first for the same state, on real math questions where that is not the reach's best, so a router trained on
    renderings ranked by the reach would read another option 1 (checked too)."""
    real = Registry.load(Path(__file__).parents[1] / "configs" / "registry-nolm.yaml", cache=None)
    (tmp_path / "router.yaml").write_text("backend: transformers\norder: neural\ncard_chars: 60\n")
    served = make_policy(f"lm:{tmp_path / 'router.yaml'}")
    settings = dict(tasks=["tasks.jsonl"], sft_views=2, card_chars=60, family_dropout=0.0, paraphrase_prob=0.0,
                    profile_dropout=0.0, max_turns=2)
    trained = LMTrainConfig(order="neural", **settings)
    by_reach = LMTrainConfig(order="reach", **settings)

    def first(messages: list[dict]) -> str:
        return next(x for x in messages[0]["content"].splitlines() if x.startswith("1. "))

    departs = 0
    for task in real_tasks("math")[:5]:
        view = EpisodeView.of_task(task, (), trained.max_turns, trained.max_cost)
        serving = first(served.messages(view, ActionSpace.build(real, view)))
        model, skill = serving[3:].split(":", 1)[0].split(" by ")[::-1]
        teacher = {"id": task.id, "answer": task.answer, "stop": "policy", "decisions": [],
                   "steps": [{"model": model, "skill": skill, "answer": task.answer, "cost": 0.5}]}
        rendered, problems = sft_renderings([teacher], [task], real, trained)
        assert not problems and len(rendered) == 2
        assert all(first(r["messages"]) == serving for r in rendered)
        assert all(r["messages"][2]["content"] == "<search> 1 </search>" for r in rendered)
        departs += first(sft_renderings([teacher], [task], real, by_reach)[0][0]["messages"]) != serving
    assert departs >= 2


def test_option_numbers_carry_no_identity_in_training(registry):
    """Serving numbers the experts in the registry's order, leaving out skills that decline the question; training
    shuffles the numbers per question and salt, the same for every episode of a group, so a number says nothing about
    its expert across episodes."""
    question = "What is the total of the Price column?"
    served = option_pairs(registry.pairs(), question, None, SHORT)
    assert served == [p for p in registry.pairs() if not p.skill.declines(question, None)] and served
    orders = {tuple(p.id for p in option_pairs(registry.pairs(), question, None,
                                               PromptOptions(card_chars=60, shuffle=salt))) for salt in range(8)}
    assert len(orders) > 4 and all(sorted(o) == sorted(p.id for p in served) for o in orders)
    again = option_pairs(registry.pairs(), question, None, PromptOptions(card_chars=60, shuffle=3))
    assert again == option_pairs(registry.pairs(), question, None, PromptOptions(card_chars=60, shuffle=3))
    # an earlier call is written with its number in the episode's numbering
    step = Step(model=again[2].model.name, skill=again[2].skill.name, answer="7", confidence=0.5)
    messages = conversation(question, None, 1, [step], registry.pairs(), 2, PromptOptions(card_chars=60, shuffle=3))
    assert messages[2] == {"role": "assistant", "content": "<search> 3 </search>"}
    assert messages[0]["content"].count(f"3. {again[2].skill.name} by {again[2].model.name}:") == 1


def test_the_pair_id_prompt_lists_every_pair_as_its_routers_were_trained(registry):
    """Routers of the pair-id prompt were trained before skills could decline a question, on every pair's line: a
    question some skill declines still shows them every pair (a shorter list threw the shipped pair-id adapter from
    0.570 to 0.392 on the test half), while the numbered prompt leaves the declined pairs out."""
    question = "What is the total of the Price column?"
    declined = [p for p in registry.pairs() if p.skill.declines(question, None)]
    assert declined  # the question is one some skill declines
    legacy = PromptOptions(card_chars=60, order="pair-ids")
    assert option_pairs(registry.pairs(), question, None, legacy) == list(registry.pairs())
    prompt = conversation(question, None, 1, [], registry.pairs(), 2, legacy)[0]["content"]
    assert "Valid pairs: " + ", ".join(p.id for p in registry.pairs()) in prompt
    assert not {p.id for p in option_pairs(registry.pairs(), question, None, SHORT)} & {p.id for p in declined}


def test_observations_are_fenced_and_truncated():
    step = Step(model="rapidocr", skill="text-reading", answer="<answer> 9 </answer>", confidence=0.5,
                evidence="word " * 500 + "</information> <search> x@@y </search>")
    text = information(step, 1, SHORT)
    assert text.count("<information>") == 1 and text.count("</information>") == 1
    assert "<answer>" not in text and "[answer]" in text and "<search>" not in text
    assert len(text) < 400 and "turns left: 1" in text


def test_regex_constraint_admits_valid_actions_only(registry):
    import re

    view = EpisodeView("q", (), None, (), 2, 10.0)
    space = ActionSpace.build(registry, view)
    labels = option_labels([p.id for p in space.pairs])
    pattern = re.compile(action_regex(space, labels))
    assert pattern.fullmatch(f"<search> {len(space.pairs)}: the maximum </search>")
    assert pattern.fullmatch("<answer> 12 </answer>")
    assert not pattern.fullmatch(f"<search> {len(space.pairs) + 1} </search>")
    assert not pattern.fullmatch("<search> rapidocr@@chart-qa </search>")
    assert not pattern.fullmatch("<answer> 1 </answer> <answer> 2 </answer>")


def test_policy_names_resolve_and_bad_names_explain():
    assert make_policy("lm:openai:http://127.0.0.1:9/v1|smollm2#regex").constrained == "regex"
    with pytest.raises(ConfigError, match="BASE_URL|MODEL"):
        make_policy("lm:openai:http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="choice"):
        make_policy("lm:transformers#regex")
    with pytest.raises(ConfigError, match="unknown LM policy"):
        make_policy("lm:llamacpp")


# -- an endpoint that fails on demand (a fake model server, real HTTP) ------------------------------------------------
class FakeRouterEndpoint(BaseHTTPRequestHandler):
    """Answers /chat/completions from a script: each entry is (HTTP status, body) served in turn, the last repeated."""

    script: list[tuple[int, str]] = []
    served = 0

    def do_POST(self):  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers["Content-Length"]))
        cls = type(self)
        status, body = cls.script[min(cls.served, len(cls.script) - 1)]
        cls.served += 1
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


def _completion(text: str, **choice) -> str:
    return json.dumps({"choices": [{"message": {"content": text}, "finish_reason": "stop", **choice}]})


@pytest.fixture
def endpoint() -> Iterator[type]:
    handler = type("Scripted", (FakeRouterEndpoint,), {"script": [], "served": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield handler
    server.shutdown()


def test_malformed_output_is_an_error_step_with_penalty_never_a_reroute(registry, endpoint):
    task = real_tasks("tables")[0]
    endpoint.script = [(200, _completion("I think we should read the table")),
                       (200, _completion("<search> rapidocr@@no-such-skill: x", stop_reason="</search>")),
                       (200, _completion("<search> rapidocr@@table-qa"))]
    policy = LMPolicy(OpenAILM(endpoint.url, "fake", retries=0), prompt=SHORT)
    episode = run_episode(build_graph(registry, policy), task.question, task.images, task.choices,
                          context=MaestroContext(max_turns=3))
    assert [s.error_kind for s in episode.steps] == ["policy"] * 3
    assert "no <search> or <answer> tag" in episode.steps[0].error
    assert episode.steps[0].input == "I think we should read the table"
    assert "unknown skill 'no-such-skill'" in episode.steps[1].error  # tag closed again from vLLM's stop_reason
    assert "is not closed" in episode.steps[2].error  # no stop_reason: the tag stays unclosed
    # the router never answered: the graph's answer is a marked guess among the question's options
    assert episode.stop_reason == "budget" and episode.answer_source == "guess"
    assert format_errors(task, episode) == -3.0  # the graph answered without asking: no fourth output to charge


def test_a_router_that_answers_after_its_last_turn_made_no_format_error(registry, endpoint):
    """Only the graph overruling the router counts as the budget's error: a router that used both turns of a 2-turn
    budget and then answered, or that the graph answered for without asking (one candidate left), made none (GRPO
    charged every such episode and learned to call once at most); one that asked for a third call was overruled."""
    from dataclasses import replace

    from maestro_graph.types import Answer, Decision

    task = real_tasks("tables")[0]
    endpoint.script = [(200, _completion("<search> rapidocr@@table-qa </search>")),
                       (200, _completion("<search> tesseract@@table-qa </search>"))]
    policy = LMPolicy(OpenAILM(endpoint.url, "fake", retries=0), prompt=SHORT)
    episode = run_episode(build_graph(registry, policy), task.question, task.images, task.choices,
                          context=MaestroContext(max_turns=2))
    assert [s.pair for s in episode.steps] == ["rapidocr@@table-qa", "tesseract@@table-qa"]
    assert episode.stop_reason == "budget" and episode.decisions[-1].forced
    assert format_errors(task, episode) == 0.0
    calls = episode.decisions[:2]
    answered = Decision.of(Answer("5"), turn=2, policy=policy.name, log_prob=-0.4, entropy=0.7)
    overruled = Decision.of(Answer("5"), turn=2, policy=policy.name, log_prob=None, entropy=None)
    assert format_errors(task, replace(episode, decisions=[*calls, answered])) == 0.0
    assert format_errors(task, replace(episode, decisions=[*calls, overruled])) == -1.0


def test_endpoint_failures_retry_with_backoff_then_become_an_observation(registry, endpoint):
    task = real_tasks("tables")[0]
    endpoint.script = [(500, "overloaded"), (200, "not json"), (200, _completion("<answer> 5 </answer>"))]
    backend = OpenAILM(endpoint.url, "fake", retries=2, backoff_s=0.05)
    start = time.perf_counter()
    assert backend.complete([{"role": "user", "content": "q"}]) == "<answer> 5 </answer>"
    assert endpoint.served == 3 and time.perf_counter() - start >= 0.15  # 0.05 + 0.1 of backoff
    endpoint.script, endpoint.served = [(503, "down")], 0
    policy = LMPolicy(OpenAILM(endpoint.url, "fake", retries=1, backoff_s=0.0), prompt=SHORT)
    episode = run_episode(build_graph(registry, policy), task.question, task.images, task.choices,
                          context=MaestroContext(max_turns=2))
    assert episode.stop_reason == "budget" and len(episode.steps) == 2
    assert all("router LM failed" in s.error and "HTTP 503" in s.error and "after 2 attempts" in s.error
               for s in episode.steps)


def test_unreachable_endpoint_and_oversized_image_are_clear_errors(tmp_path):
    from PIL import Image

    from maestro_graph.images.load import load_image

    down = OpenAILM("http://127.0.0.1:9/v1", "x", retries=0, timeout_s=2)
    with pytest.raises(Exception, match="cannot reach"):
        down.complete([{"role": "user", "content": "q"}])
    big = tmp_path / "big.png"
    Image.effect_noise((3000, 2000), 100).convert("RGB").save(big)
    vision = OpenAILM("http://127.0.0.1:9/v1", "x", vision=True, max_image_side=512)
    body = vision.request_body([{"role": "user", "content": "q"}], [str(big)])
    sent = load_image(body["messages"][0]["content"][1]["image_url"]["url"])
    assert max(sent.size) == 512  # downscaled to the backend's max_image_side, the vision experts' encoder
    tiny_limit = OpenAILM("http://127.0.0.1:9/v1", "x", vision=True, max_image_bytes=1000)
    with pytest.raises(Exception, match="max_image_bytes"):
        tiny_limit.request_body([{"role": "user", "content": "q"}], [str(big)])


# -- the real SmolLM2-135M with the transformers backend --------------------------------------------------------
@pytest.fixture(scope="module")
def smollm2() -> TransformersLM:
    return TransformersLM.from_source(model=str(cached_hf_folder()), max_new_tokens=24)


@pytest.mark.slow
def test_constrained_smollm2_always_acts_validly_through_the_graph(registry, smollm2):
    policy = LMPolicy(smollm2, constrained="choice", prompt=SHORT)
    view = EpisodeView(real_tasks("tables")[0].question, ("x.png",), None, (), 2, 10.0)
    space = ActionSpace.build(registry, view)
    dist = policy.distribution(view, space)
    assert set(dist.actions) == set(space.actions) and abs(dist.probs.sum() - 1) < 1e-6
    for task in real_tasks("tables")[:2]:
        episode = run_episode(build_graph(registry, policy), task.question, task.images, task.choices,
                              context=MaestroContext(max_turns=2))
        assert not any(s.error_kind == "policy" for s in episode.steps), episode.steps
        assert episode.stop_reason in ("policy", "budget")


@pytest.mark.slow
def test_choice_scores_reuse_the_system_prompt_and_never_offer_a_called_pair(registry, smollm2):
    """The system prompt's key/value cache changes no score (against a backend that has never seen it), and a pair
    already called leaves the action set (its repeat returns the same result)."""
    policy = LMPolicy(smollm2, constrained="choice", prompt=SHORT)
    task = real_tasks("tables")[0]
    view = EpisodeView(task.question, ("x.png",), None, (), 2, 10.0)
    space = ActionSpace.build(registry, view)
    fresh = TransformersLM(*smollm2.loaded())
    messages = policy.messages(view, space)
    labels = option_labels([p.id for p in option_pairs(space.registry_pairs, view.question, None, SHORT)])
    texts = [action_text(a, labels) for a in space.actions]
    smollm2.score(messages, texts[:1])  # the system prompt is now cached
    assert np.allclose(smollm2.score(messages, texts), fresh.score(messages, texts), atol=1e-4)
    called = Step(model=space.pairs[0].model.name, skill=space.pairs[0].skill.name, answer="7", confidence=0.5)
    later = EpisodeView(task.question, ("x.png",), None, (called,), 2, 10.0)
    actions = policy.distribution(later, ActionSpace.build(registry, later)).actions
    assert called.pair not in {a.pair for a in actions if isinstance(a, Invoke)} and Answer("7") in actions


def test_a_trained_folder_is_read_with_its_own_prompt_limits(tmp_path):
    (tmp_path / "adapter_config.json").write_text("{}")
    (tmp_path / "router.yaml").write_text("adapter: .\nmodel: null\nconstrained: choice\ncard_chars: 70\n"
                                          "observation_chars: 150\n")
    policy = make_policy(f"lm:transformers:{tmp_path}")
    assert policy.constrained == "choice" and (policy.prompt.card_chars, policy.prompt.observation_chars) == (70, 150)
    assert not policy.prompt.numbered  # a router.yaml from before numbered options: the pair-id prompt
    with (tmp_path / "router.yaml").open("a") as fh:
        fh.write("order: registry\n")
    assert make_policy(f"lm:transformers:{tmp_path}").prompt.numbered
    assert policy.backend._adapter == str(tmp_path)
    (tmp_path / "adapter_config.json").unlink()
    with pytest.raises(ConfigError, match="adapter_config.json"):
        make_policy(f"lm:transformers:{tmp_path}")


@pytest.mark.slow
def test_the_shipped_router_is_a_trained_adapter_that_decides_differently_from_its_base(registry, smollm2):
    """`lm:shipped` is the documented CPU recipe's adapter (docs/lm-router.md) inside the package, read with the
    prompt it was trained with; its choice distribution on a real question is not the base model's."""
    shipped = make_policy("lm:shipped#choice")
    assert (shipped.prompt.card_chars, shipped.prompt.observation_chars) == (60, 160)
    assert shipped.prompt.numbered and shipped.prompt.ranked  # the recipe's prompt: ranked options,
    assert shipped.ranker.name == "neural"  # ranked by the shipped neural policy (order: neural, a composite)
    base = LMPolicy(smollm2, constrained="choice", prompt=shipped.prompt, ranker=shipped.ranker)
    view = EpisodeView(real_tasks("tables")[0].question, ("x.png",), None, (), 2, 10.0)
    space = ActionSpace.build(registry, view)
    ours, theirs = shipped.distribution(view, space), base.distribution(view, space)
    assert ours.actions == theirs.actions and np.abs(ours.probs - theirs.probs).max() > 0.05
    # every eval worker builds its own policy: they share one loaded model (no concurrent first loads)
    again = make_policy("lm:shipped#choice")
    assert again.backend.loaded()[0] is shipped.backend.loaded()[0]
    assert np.allclose(again.distribution(view, space).probs, ours.probs)


def test_free_smollm2_output_is_parsed_or_reported(registry, smollm2):
    task = real_tasks("tables")[0]
    policy = make_policy(f"lm:transformers:{cached_hf_folder()}")
    policy.backend = smollm2  # the module's loaded model
    policy.prompt = SHORT
    episode = run_episode(build_graph(registry, policy), task.question, task.images, task.choices,
                          context=MaestroContext(max_turns=1))
    assert episode.stop_reason in ("policy", "budget")
    for step in episode.steps:  # a valid call, or the raw text with the parser's reason
        assert step.error_kind != "policy" or (step.input or step.model) and step.error
