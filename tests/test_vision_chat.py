"""Skills carried out by a vision-chat model (registry.vision), Maestro's side, against VisionEndpointDouble
(tests/vision_double.py), the named test double for scripted answers and faults: which pairs a vision-chat card makes,
what each pair sends (the skill's instructions, the image, the options) and how a scripted reply becomes the answer,
and the endpoint's failures as named error steps of an episode that still ends. What a real server makes of these
requests (that vLLM takes them, counts their tokens, refuses too many images) is tests/test_vllm_vision.py's."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw
from typer.testing import CliRunner
from vision_double import VisionEndpointDouble

from maestro_graph.doors.cli import app
from maestro_graph.episode.context import MaestroContext
from maestro_graph.episode.graph import build_graph
from maestro_graph.episode.runner import run_episode
from maestro_graph.errors import ExpertFailure, SkillError
from maestro_graph.policy import make_policy
from maestro_graph.registry import Registry, load_skill
from maestro_graph.registry.profiles import pair_fingerprint
from maestro_graph.registry.vision import parse_reply, procedure_hash
from maestro_graph.types import ErrorKind, Invoke

ROOT = Path(__file__).resolve().parents[1]
NOLM = ROOT / "configs" / "registry-nolm.yaml"
SKILLS = ROOT / "skills"
VISION_SKILLS = ["chart-qa", "table-qa", "document-fields", "counting", "visual-math", "text-reading", "visual-qa"]
PER_CALL, PER_1K = 0.5, 2.0


def _registry_file(folder: Path, url: str, card: str = "") -> Path:
    """registry-nolm.yaml extended with a vision-chat card on `url` (plus `card`'s extra YAML lines)."""
    path = folder / "registry-vlm.yaml"
    path.write_text(f"""
extends: {NOLM}
models:
  - name: vlm
    description: A vision-language chat model served by vLLM (a test double here).
    capabilities: [vision-chat, chat]
    backend: {{type: openai, base_url: "{url}", model: vlm-double, max_tokens: 64}}
    cost: {{per_call: {PER_CALL}, per_1k_tokens: {PER_1K}}}
    timeout_s: 5
{card}""")
    return path


def _image(folder: Path, name: str, size: tuple[int, int] = (160, 120)) -> tuple[Path, np.ndarray]:
    """A small drawing unlike the others (its name is drawn in), saved as PNG; its pixels for comparison."""
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    draw.rectangle((10, 10, 10 + 7 * len(name), 40), fill=(200, 30, 30))
    draw.text((12, 60), name, fill="black")
    path = folder / f"{name}.png"
    image.save(path)
    return path, np.asarray(image)


def test_a_vision_chat_card_pairs_with_every_skill_a_vlm_can_carry_out(tmp_path):
    with VisionEndpointDouble() as double:
        registry = _registry_file(tmp_path, double.url)
        result = CliRunner().invoke(app, ["registry", "show", "--json", "--registry", str(registry)])
    assert result.exit_code == 0, result.output
    info, _ = json.JSONDecoder().raw_decode(result.output[result.output.index("{"):])  # warnings may follow
    vlm = sorted(p.removeprefix("vlm@@") for p in info["pairs"] if p.startswith("vlm@@"))
    assert set(VISION_SKILLS) <= set(vlm)
    assert "general-qa" in vlm  # the card has `chat` too: general-qa stays chat over OCR text
    assert {"rapidocr@@chart-qa", "opencv-vision@@counting"} <= set(info["pairs"])  # the CPU pairs are all still there
    chart = next(s for s in info["skills"] if s["name"] == "chart-qa")
    assert chart["requires"] == ["ocr"] and chart["or_requires"] == ["vision-chat"]


def test_the_shipped_vlm_registry_pairs_its_cards_and_names_the_missing_key(monkeypatch):
    monkeypatch.delenv("VLM_API_KEY", raising=False)
    registry = Registry.load(ROOT / "configs" / "registry-vlm.yaml")
    cards = [h.card for h in registry.models.values() if "vision-chat" in h.card.capabilities]
    assert len(cards) == 4 and all(c.max_input_side and c.cost.per_1k_tokens for c in cards)
    hosted = [c for c in cards if c.backend.api_key_env]
    assert len(hosted) == 2 and all("VLM_API_KEY" in registry.models[c.name].unavailable_reason() for c in hosted)
    served = [c.name for c in cards if not c.backend.api_key_env]
    pairs = set(registry.pair_ids())
    assert all(f"{name}@@{skill}" in pairs for name in served for skill in VISION_SKILLS)


# (skill, question, choices, what the double replies, the answer parsed from it, a text the prompt must hold)
CASES = [
    ("chart-qa", "According to the chart, which year had the highest sales?", ["2019", "2020", "2021"], "B",
     "2020", "B. 2020"),
    ("table-qa", "How much do two pencils cost in all?", None, "$2.50 in total", "2.5", "number only"),
    ("document-fields", "What is the date on the receipt?", None, "The answer is 12/03/2019.", "12/03/2019",
     "short answer"),
    ("counting", "How many circles are there in the image?", None, "There are 5 circles.", "5", "number only"),
    ("visual-math", "In the figure, what is the measure of angle ABC?", ["30°", "60°", "90°"], "(C) 90°", "90°",
     "C. 90°"),
    ("text-reading", "What does the sign say?", None, "OPEN 24 HOURS", "OPEN 24 HOURS", "short answer"),
    ("visual-qa", "Is there a red rectangle in the picture? Answer yes or no.", None, "Yes, there is.", "Yes",
     "Yes or No"),
]


@pytest.fixture(scope="module")
def double():
    with VisionEndpointDouble(replies=[(case[1][:20], case[3]) for case in CASES]) as server:
        yield server


@pytest.fixture(scope="module")
def vlm_registry(double, tmp_path_factory) -> Registry:
    return Registry.load(_registry_file(tmp_path_factory.mktemp("vlm"), double.url))


@pytest.mark.parametrize("skill, question, choices, reply, answer, prompt", CASES, ids=[c[0] for c in CASES])
def test_each_pair_sends_the_instructions_image_and_options_and_parses_the_reply(
        vlm_registry, double, tmp_path, skill, question, choices, reply, answer, prompt):
    """Maestro's side: the request it builds, and the step it makes of a scripted reply and `usage`. That real vLLM
    takes such a request under every skill and that its own token count is the card's arithmetic is
    tests/test_vllm_vision.py's test_a_vision_chat_pair_answers_through_every_skill_it_pairs_with."""
    path, pixels = _image(tmp_path, skill)
    before = len(double.requests)
    step = vlm_registry.run(Invoke("vlm", skill), question=question, images=[str(path)], choices=choices)
    assert step.error is None, step.error
    assert step.answer == answer and step.confidence > 0
    (received,) = double.requests[before:]
    assert received.system == vlm_registry.skills[skill].instructions  # the SKILL.md body, not the skill's code
    assert question in received.user_text and prompt in received.user_text
    assert received.formats == ["png"] and np.array_equal(np.asarray(received.images[0].convert("RGB")), pixels)
    assert received.body["model"] == "vlm-double" and received.body["max_tokens"] == 64
    (call,) = step.calls  # no OCR or CV call: the model carried the skill out; the server's usage is recorded
    assert call["model"] == "vlm" and (call["prompt_tokens"], call["completion_tokens"]) == (
        double.usage["prompt_tokens"], double.usage["completion_tokens"])
    assert step.cost == pytest.approx(PER_CALL + PER_1K * (call["prompt_tokens"] + call["completion_tokens"]) / 1000)


def test_the_cpu_pairs_keep_their_code_hash_and_profile(tmp_path):
    """Declaring `or-requires` leaves the hash of the skill's code (and so its CPU pairs' profile entries and cached
    steps) as it was; the vision pair's fingerprint is the instructions' and the shared procedure's."""
    registry = Registry.load(NOLM)
    assert {"rapidocr@@chart-qa", "opencv-vision@@counting"} <= set(registry.profiles)
    folder = tmp_path / "chart-qa"
    shutil.copytree(SKILLS / "chart-qa", folder, ignore=shutil.ignore_patterns("__pycache__"))
    declared = load_skill(folder)
    skill_md = folder / "SKILL.md"
    skill_md.write_text(skill_md.read_text().replace('  or-requires: "vision-chat"\n', ""))
    plain = load_skill(folder)
    assert not plain.or_requires and declared.code_hash == plain.code_hash
    vlm, ocr = Registry.load(_registry_file(tmp_path, "http://127.0.0.1:9/v1")).models["vlm"].card, \
        registry.models["rapidocr"].card
    assert procedure_hash(ocr, declared) == declared.code_hash != procedure_hash(vlm, declared)
    assert pair_fingerprint(vlm, declared) != pair_fingerprint(vlm, load_skill(SKILLS / "table-qa"))


@pytest.mark.parametrize("value, problem", [('"ocr"', "must be one of ['vision-chat']"),
                                            ('>-\n    vision-chat', "on one line")])
def test_a_bad_or_requires_names_the_field(tmp_path, value, problem):
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "skill.py").write_text("def run(ctx):\n    return None\n")
    (folder / "SKILL.md").write_text(f'---\nname: s\ndescription: d\nmetadata:\n  tier: "1"\n  requires: "ocr"\n'
                                     f'  or-requires: {value}\n  entry: "skill.py:run"\n---\nbody\n')
    with pytest.raises(SkillError, match="metadata.or-requires") as err:
        load_skill(folder)
    assert problem in str(err.value)


@pytest.mark.parametrize("reply, question, choices, expected", [
    ("**B**", "Which one?", ["red", "blue"], "blue"),
    ("The answer is A.", "Which one?", ["red", "blue"], "red"),
    ("It looks blue to me", "Which one?", ["red", "blue"], "blue"),
    ("b", "Which letter is circled? A, B or C", ["A", "B", "C"], "B"),
    ("No.", "Is it red?", None, "No"),
    ("(3, 4)", "How many rows and columns does the table have?", None, "(3,4)"),
    ("about 1,250 kg", "How much does it weigh?", None, "1250"),
    ("Hmm", "How many dots?", None, None),
])
def test_replies_become_answers_in_the_question_s_form(reply, question, choices, expected):
    assert parse_reply(reply, question, choices) == expected


def _episode(registry: Registry, path: Path, skill: str = "chart-qa"):
    graph = build_graph(registry, make_policy("rules"))
    context = MaestroContext(policy=f"fixed:vlm@@{skill}", max_turns=2)
    return run_episode(graph, "Which bar is the tallest?", [str(path)], ["A", "B"], context=context)


@pytest.mark.slow
@pytest.mark.parametrize("behaviour, message, failure", [
    (429, "HTTP 429 Too Many Requests (rate-limited", ExpertFailure.UNAVAILABLE),
    ("malformed", "malformed reply", ExpertFailure.WRONG_TYPE),
    ("hang", "timed out", ExpertFailure.TIMEOUT),
])
def test_endpoint_failures_are_named_error_steps_and_the_episode_ends(tmp_path, behaviour, message, failure):
    path, _ = _image(tmp_path, "bars")
    with VisionEndpointDouble(hang_s=3.0) as double:
        double.behaviour = behaviour
        registry = Registry.load(_registry_file(tmp_path, double.url, "    timeout_s: 1\n"
                                                "    retries: {attempts: 2, backoff_s: 0.01}\n"))
        result = _episode(registry, path)
        step = result.steps[0]
        assert step.model == "vlm" and step.error_kind == ErrorKind.EXPERT and message in step.error
        assert [c["failure"] for c in step.calls] == [failure] * len(step.calls)
        assert double.posts == (1 if behaviour == "malformed" else 2)  # transient failures are retried once
        assert result.answer in {"A", "B"} and result.answer_source == "guess"  # the episode ends with an answer


def test_an_oversized_image_is_downscaled_or_refused_by_name(tmp_path):
    path, _ = _image(tmp_path, "large", size=(1200, 900))
    with VisionEndpointDouble(default="7") as double:
        small = Registry.load(_registry_file(tmp_path, double.url, "    max_input_side: 400\n"))
        step = small.run(Invoke("vlm", "counting"), question="How many circles are there?", images=[str(path)])
        assert step.answer == "7" and double.requests[-1].images[0].size == (400, 300)
        tiny = Registry.load(_registry_file(tmp_path, double.url, "    max_image_bytes: 100\n"))
        step = tiny.run(Invoke("vlm", "counting"), question="How many circles are there?", images=[str(path)])
    assert step.error_kind == ErrorKind.EXPERT and "max_image_bytes" in step.error and "1200x900" in step.error
    assert double.posts == 1  # refused before sending


def test_serve_vlm_starts_a_vllm_server_per_loopback_vision_card():
    """scripts/serve-vlm.sh reads the registry as Maestro does; --dry-run prints the `vllm serve` commands of a GPU
    machine, or with no GPU the CPU build's scripts/serve-vllm.sh, shell-quoted: each pastes as the argument list it
    runs."""
    import os
    import shlex
    import subprocess
    import sys

    def dry_run(**env: str) -> list[str]:
        done = subprocess.run([str(ROOT / "scripts" / "serve-vlm.sh"), "--dry-run", "configs/registry-vlm.yaml"],
                              cwd=ROOT, env={**os.environ, "PYTHON": sys.executable, **env}, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    lines = dry_run(GPUS="1")
    assert [line.split(":")[0] for line in lines] == ["qwen2.5-vl-7b", "qwen3-vl-8b"]  # not the hosted cards
    argv = [shlex.split(line.split(": ", 1)[1]) for line in lines]
    assert argv[0][:7] == ["vllm", "serve", "Qwen/Qwen2.5-VL-7B-Instruct", "--host", "127.0.0.1", "--port", "8101"]
    for words in argv:  # one GPU: the shares add up to 0.9; the context is the card's max_model_len
        assert words[words.index("--gpu-memory-utilization") + 1] == "0.45"
        assert words[words.index("--max-model-len") + 1] == "16384"
        assert json.loads(words[words.index("--limit-mm-per-prompt") + 1]) == {"image": 4, "video": 0}
    two = [shlex.split(line.split(": ", 1)[1]) for line in dry_run(GPUS="2")]  # one GPU each, 0.9 of it
    assert [w[:2] for w in two] == [["env", "CUDA_VISIBLE_DEVICES=0"], ["env", "CUDA_VISIBLE_DEVICES=1"]]
    assert all(w[w.index("--gpu-memory-utilization") + 1] == "0.9" for w in two)
    cpu = [shlex.split(line.split(": ", 1)[1]) for line in dry_run(GPUS="0")]  # no GPU: vLLM's CPU build
    assert cpu[0][:4] == ["scripts/serve-vllm.sh", "8101", "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct"]
    assert all("--gpu-memory-utilization" not in w and w[w.index("--max-model-len") + 1] == "16384" for w in cpu)


def test_serve_vlm_starts_servers_one_after_another_and_sigterm_to_it_stops_them_all(tmp_path):
    """scripts/serve-vlm.sh on a registry with two loopback vision cards, its `VLLM` a named fake
    (tests/vision_double.py run as `vllm serve`, taking a second to start where vLLM takes minutes): the second server
    starts once the first answers /v1/models, and SIGTERM to the script alone stops both. A real server started by the
    script, asked with an image and stopped with no process left, is tests/test_docs_vision.py's."""
    import os
    import signal
    import subprocess
    import sys

    from servers import descendants, processes

    from maestro_graph.doors.serve.loopback import free_port

    ports = [free_port(), free_port()]
    registry = tmp_path / "registry.yaml"
    registry.write_text("extends: default\nmodels:\n" + "".join(f"""
  - name: vlm{i}
    description: A vision-language model served by vllm serve on a local GPU.
    capabilities: [vision-chat]
    backend: {{type: openai, base_url: "http://127.0.0.1:{port}/v1", model: vlm-double}}
""" for i, port in enumerate(ports)))
    vllm = tmp_path / "vllm"  # the `vllm` command, standing in for the GPU-only server
    vllm.write_text(f"#!/bin/sh\nexec {sys.executable} {ROOT / 'tests' / 'vision_double.py'} \"$@\"\n")
    vllm.chmod(0o755)
    logs = tmp_path / "logs"
    script = subprocess.Popen([str(ROOT / "scripts" / "serve-vlm.sh"), str(registry)], cwd=ROOT,
                              env={**os.environ, "PYTHON": sys.executable, "VLLM": str(vllm), "GPUS": "1",
                                   "LOG_DIR": str(logs), "DOUBLE_STARTUP_S": "1"},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        lines = []
        for line in script.stdout:
            lines.append(line)
            if "servers are up" in line:
                break
        started = descendants(script.pid)
    finally:
        script.send_signal(signal.SIGTERM)  # the script alone, not its process group: it stops its servers
        script.wait(timeout=30)
    assert f"vlm0: {vllm} serve vlm-double --host 127.0.0.1 --port {ports[0]}" in lines[0], lines
    assert all(f"vlm{i} is up on http://127.0.0.1:{p}/v1" in "".join(lines) for i, p in enumerate(ports)), lines
    first, second = ([json.loads(line) for line in (logs / f"vlm{i}.log").read_text().splitlines()] for i in range(2))
    assert second[0]["started"] >= first[1]["listening"]  # one after another
    for log in (first, second):
        assert log[0]["argv"][log[0]["argv"].index("--gpu-memory-utilization") + 1] == "0.45"
    servers = {first[0]["pid"], second[0]["pid"]}
    assert servers <= started, (servers, started)
    assert script.returncode == 128 + signal.SIGTERM
    assert not started & set(processes()), "a server outlived the script"
    for port in ports:
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
