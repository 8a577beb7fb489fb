"""`maestro reliability`: the fault suite and the bad-input suite, written as a table (markdown + JSON).

Fault suite: episodes over real items through the real graph, with fault injection (registry.faults) on every
expert of a registry of fast local experts, the expert cache off (so every call really meets its fault), and
the card's timeout, retries and circuit breaker doing their work. Each scenario reports faults injected, episodes
completed (an answer or an explicit no-answer), episodes lost (an episode that raised: must be zero) and accuracy
against the same episodes without faults.

Bad-input suite: hostile images, questions, task-file paths and skill folders, each with the outcome it must
have (refused with a named error, or handled), checked through the public loaders and through whole episodes.

Trust-boundary suite (maestro_graph/operations/reliability/trust.py): every attack a client could make on a served
Maestro, run against a real server on loopback. "Passed" means every scenario of all three suites passed; a trust
check that cannot run against this installation (LangServe's routes without the `langserve` extra) is reported as
skipped, with the reason, and neither passes nor fails the run.
"""

from __future__ import annotations

import io
import json
import struct
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from PIL import Image

from ...core.bundled import bundled_dir
from ...core.question_text import MAX_QUESTION_CHARS
from ...core.tasks import Task, load_tasks
from ...episode.context import MaestroContext
from ...episode.graph import build_graph
from ...episode.runner import run_episode, run_tasks
from ...errors import InputError, SkillError
from ...images.load import load_image
from ...policy import make_policy
from ...registry import Registry, load_config, load_skill
from ...types import ErrorKind, Invoke, Step, StopReason
from .admission import ADMISSION_CHECKS
from .conversation import CONVERSATION_CHECKS
from .registries import FAST_MODELS, fault_registry
from .traffic import TRAFFIC_CHECKS
from .trust import TRUST_CHECKS, run_trust_suite

__all__ = ["FaultScenario", "SCENARIOS", "FAST_MODELS", "hostile_images", "fault_registry", "run_reliability",
           "bad_skill_registry"]

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TASKS = (ROOT / "tests" / "data" / "real" / "barcode" / "tasks.jsonl",
                 ROOT / "tests" / "data" / "real" / "vision" / "tasks.jsonl")
EXAMPLES = bundled_dir("examples")  # shipped in the package (a wheel has no repo root)


@dataclass(frozen=True)
class FaultScenario:
    name: str
    faults: dict = field(default_factory=dict)
    attempts: int = 3


SCENARIOS = (
    FaultScenario("30% errors + 10% hangs", {"error_rate": 0.3, "hang_rate": 0.1}),
    FaultScenario("30% errors + 10% hangs, no retries", {"error_rate": 0.3, "hang_rate": 0.1}, attempts=1),
    FaultScenario("10% garbage + 10% oversized", {"garbage_rate": 0.1, "oversized_rate": 0.1}),
)


# -- registries -------------------------------------------------------------------------------------------------
def bad_skill_registry(folder: Path, *, skill_timeout_s: float = 1.0) -> Path:
    """A registry with three broken tier-1 skills on the zxing expert: one raises, one hangs, one returns the
    wrong type."""
    bodies = {
        "raiser": "def run(ctx):\n    raise RuntimeError('skill bug')\n",
        "sleeper": "import time\n\ndef run(ctx):\n    time.sleep(30)\n",
        "wrong-type": "def run(ctx):\n    return {'answer': '42'}\n",
    }
    skills = folder / "skills"
    for name, code in bodies.items():
        (skills / name).mkdir(parents=True, exist_ok=True)
        (skills / name / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: A broken skill ({name}) for the reliability suite.\nmetadata:\n"
            f"  tier: \"1\"\n  requires: \"barcode\"\n  entry: \"skill.py:run\"\n---\nBroken on purpose.\n")
        (skills / name / "skill.py").write_text(code)
    zxing = next(c for c in load_config().models if c.name == "zxing")
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump({"skill_dirs": [str(skills)], "skill_timeout_s": skill_timeout_s,
                                    "models": [zxing.model_dump(mode="json", exclude_defaults=True)]}))
    return path


# -- hostile inputs ------------------------------------------------------------------------------------------------
def _png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def _bomb_png(width: int, height: int) -> bytes:
    """A valid-looking PNG of a few hundred bytes whose header claims `width`x`height` pixels."""
    data = bytearray(_png(Image.new("L", (1, 1))))
    ihdr = bytearray(data[12:29])  # chunk type + 13 data bytes
    ihdr[4:12] = struct.pack(">II", width, height)
    data[12:29] = ihdr
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(ihdr)) & 0xFFFFFFFF)
    return bytes(data)


def hostile_images(folder: Path) -> dict[str, Path]:
    """Hostile and broken image files, written into `folder`, by name."""
    folder.mkdir(parents=True, exist_ok=True)
    qr = (EXAMPLES / "qrcode.png").read_bytes()
    frames = [Image.new("RGB", (64, 64), c) for c in ("white", "black", "red")]
    gif = io.BytesIO()
    frames[0].save(gif, format="GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    files = {
        "zero-byte.png": b"",
        "truncated.png": qr[: len(qr) // 2],
        "not-an-image.png": b"#!/bin/sh\necho this is a script, not a picture\n",
        "png-named.jpg": qr,
        "bomb.png": _bomb_png(20_000, 20_000),
        "animated.gif": gif.getvalue(),
        "strip.png": _png(Image.new("RGB", (5000, 10), "white")),
    }
    paths = {}
    for name, data in files.items():
        (folder / name).write_bytes(data)
        paths[name] = folder / name
    return paths


@dataclass
class InputCase:
    category: str
    case: str
    expected: str  # "rejected" (a named error) or "handled" (an answer or a clean no-answer)
    outcome: str = ""
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == self.expected


def _expect_error(case: InputCase, func: Callable[[], object], error: type[Exception], match: str) -> None:
    try:
        func()
    except error as exc:
        case.outcome, case.detail = ("rejected", str(exc)[:300]) if match in str(exc) else ("wrong error", str(exc))
    except Exception as exc:  # the suite's boundary: an unexpected exception is a failure of the case, recorded
        case.outcome, case.detail = "crashed", f"{exc.__class__.__name__}: {exc}"
    else:
        case.outcome, case.detail = "accepted", "no error raised"


def bad_input_suite(folder: Path, registry: Registry) -> list[InputCase]:
    """Every hostile input the suite knows (images, questions, task files), checked at its loader and through a whole
    episode."""
    images = hostile_images(folder / "images")
    graph = build_graph(registry, make_policy("rules"))
    cases: list[InputCase] = []

    def image_case(name: str, match: str) -> None:
        case = InputCase("image", name, "rejected")
        _expect_error(case, lambda: load_image(str(images[name])), InputError, match)
        result = run_episode(graph, "What text does the code encode?", [str(images[name])])
        if case.ok and not (result.error is None and result.answer is None
                            and any(s.error_kind == ErrorKind.INPUT for s in result.steps)):
            case.outcome, case.detail = "episode not refused", str([s.error for s in result.steps])
        cases.append(case)

    image_case("zero-byte.png", "the file is empty (0 bytes)")
    image_case("truncated.png", "corrupt or truncated image")
    image_case("not-an-image.png", "not a readable image")
    image_case("bomb.png", "above the cap of")
    image_case("strip.png", "extreme aspect ratio")
    for name, check in (("png-named.jpg", lambda r: r.answer == "Wikipedia"),
                        ("animated.gif", lambda r: r.error is None)):
        case = InputCase("image", name, "handled")
        result = run_episode(graph, "What text does the code encode?", [str(images[name])])
        case.outcome = "handled" if check(result) else "wrong answer"
        case.detail = f"answer {result.answer!r}" + (" (first frame)" if name.endswith(".gif") else "")
        cases.append(case)
    remote = InputCase("image", "remote URL", "rejected")
    _expect_error(remote, lambda: load_image("https://example.com/cat.png"), InputError, "remote URLs are not fetched")
    cases.append(remote)

    qr = str(EXAMPLES / "qrcode.png")
    for name, question, images_, expected, check in (
        ("empty", "   ", [], "rejected", lambda r: r.answer is None and r.stop == StopReason.INPUT_ERROR),
        ("very long", "What is this? " * (MAX_QUESTION_CHARS // 10), [qr], "rejected",
         lambda r: r.answer is None and "above the cap" in r.stop_reason),
        ("control characters", "What text does the\x00 QR\u202e code\x1b encode?", [qr], "handled",
         lambda r: r.answer == "Wikipedia"),
        ("mixed scripts", "What text does the QR code encode? Что закодировано? 这个二维码是什么?", [qr], "handled",
         lambda r: r.answer == "Wikipedia"),
    ):
        case = InputCase("question", name, expected)
        result = run_episode(graph, question, images_)
        case.outcome = expected if check(result) and result.error is None else "wrong outcome"
        case.detail = f"answer {result.answer!r}, stop {result.stop_reason!r}"
        cases.append(case)

    tasks_dir = folder / "tasks"
    tasks_dir.mkdir(exist_ok=True)
    (tasks_dir / "ok.png").write_bytes((EXAMPLES / "qrcode.png").read_bytes())
    for name, ref, match in (("traversal", "../../../../etc/passwd", "outside the allowed directories"),
                             ("absolute path outside", str(EXAMPLES / "qrcode.png"), "outside the allowed directories"),
                             ("remote URL", "http://example.com/a.png", "remote URLs are not allowed")):
        file = tasks_dir / "tasks.jsonl"
        file.write_text(json.dumps({"id": "t", "question": "q?", "images": ["ok.png", ref]}) + "\n")
        tasks, problems = load_tasks(file)
        case = InputCase("task file", name, "rejected")
        case.outcome = "rejected" if not tasks and problems and match in problems[0].error else "accepted"
        case.detail = problems[0].error[:160] if problems else "loaded"
        cases.append(case)

    bad = Registry.load(bad_skill_registry(folder / "bad-skills"))
    for skill, match in (("raiser", "crashed: RuntimeError: skill bug"), ("sleeper", "did not finish within"),
                         ("wrong-type", "returned dict; a tier-1 skill returns SkillResult")):
        case = InputCase("skill", skill, "rejected")
        step = bad.run(Invoke("zxing", skill), question="q?", images=[qr])
        contained = step.error_kind == ErrorKind.SKILL and match in (step.error or "")
        case.outcome, case.detail = ("rejected" if contained else "not contained"), (step.error or "")[:160]
        cases.append(case)
    broken = folder / "broken-skills" / "broken"
    broken.mkdir(parents=True, exist_ok=True)
    (broken / "SKILL.md").write_text("---\nname: broken\ndescription: x\nmetadata:\n  tier: \"3\"\n"
                                     "  requires: \"ocr\"\n  entry: \"../../escape.py:run\"\n---\n")
    case = InputCase("skill", "invalid SKILL.md (bad tier, entry outside its folder)", "rejected")
    _expect_error(case, lambda: load_skill(broken), SkillError, "metadata.tier")
    if case.ok and "outside the skill folder" not in case.detail:
        case.outcome = "entry escape not named"
    cases.append(case)
    return cases


# -- fault suite -------------------------------------------------------------------------------------------------
def _items(task_files: list[Path]) -> list[Task]:
    items = [Task(id="example-circles", question="How many circles are in the image?",
                  images=[str(EXAMPLES / "circles.png")], answer="7", answer_type="number"),
             Task(id="example-qr", question="What text does the QR code encode?",
                  images=[str(EXAMPLES / "qrcode.png")], answer="Wikipedia", answer_type="text")]
    for file in task_files:
        tasks, _ = load_tasks(file)
        items.extend(tasks)
    return items


def _episodes(items: list[Task], n: int) -> list[Task]:
    """`n` episodes cycling over the items (each repeat gets its own id, so its own sampling seed)."""
    return [items[i % len(items)].model_copy(update={"id": f"{items[i % len(items)].id}#{i // len(items)}"})
            for i in range(n)]


def _score(task: Task, answer: str | None) -> float:
    return task.score(answer)


def _cause(step: Step) -> str:
    """What made a failed step fail, for the table: the failure kind of its last failed expert call (set where the
    call failed), else "other" (a skill's own error)."""
    failed = [c for c in step.calls if c.get("error")]
    failure = failed[-1].get("failure") if failed else None
    return str(failure) if failure else "other"


def _run_scenario(registry: Registry, episodes: list[Task], policy: str, workers: int) -> dict:
    start = time.perf_counter()
    completed = lost = answered = expert_errors = 0
    scores = []
    causes: Counter[str] = Counter()
    for task, result in run_tasks(registry, episodes, policy, context=MaestroContext(), workers=workers):
        if result.error is not None:
            lost += 1
            continue
        completed += 1
        answered += result.answer is not None
        expert_errors += sum(s.error_kind == ErrorKind.EXPERT for s in result.steps)
        causes.update(_cause(s) for s in result.steps if s.error)
        scores.append(_score(task, result.answer))
    injected: Counter[str] = Counter()
    trips = 0
    for handle in registry.models.values():
        trips += handle.breaker.trips
        injected.update(handle.faults_injected())
    return {"episodes": len(episodes), "completed": completed, "answered": answered,
            "no_answer": completed - answered, "lost": lost, "accuracy": sum(scores) / max(1, len(episodes)),
            "faults_injected": {k: v for k, v in sorted(injected.items()) if k != "none"},
            "clean_calls": injected.get("none", 0), "expert_error_steps": expert_errors,
            "step_errors": dict(causes.most_common()), "breaker_trips": trips,
            "wall_s": round(time.perf_counter() - start, 1)}


def run_reliability(out: Path, *, episodes: int = 200, policy: str = "rules", workers: int = 4,
                    task_files: list[Path] | None = None, seed: int = 0,
                    progress: Callable[[str], None] = lambda _m: None) -> dict:
    """Run both suites, write `out/reliability.md` and `out/reliability.json`, and return the results."""
    out.mkdir(parents=True, exist_ok=True)
    files = list(task_files) if task_files is not None else [f for f in DEFAULT_TASKS if f.is_file()]
    items = _items(files)
    planned = _episodes(items, episodes)
    folders = {name: out / "registries" / name for name in ("no-faults", *(f"s{i}" for i in range(len(SCENARIOS))))}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)

    progress(f"baseline: {len(items)} distinct items without faults")
    baseline_reg = Registry.load(fault_registry(folders["no-faults"], None, seed=seed))
    base = {t.id: r for t, r in run_tasks(baseline_reg, items, policy, workers=workers)}
    base_acc = sum(_score(t, base[t.id.rpartition("#")[0]].answer) for t in planned) / len(planned)
    scenarios: list[dict[str, Any]] = [{"scenario": "no faults", "episodes": len(planned), "accuracy": base_acc,
                  "note": "the same episodes; deterministic policy and experts, so each distinct item ran once"}]
    for i, scenario in enumerate(SCENARIOS):
        progress(f"scenario {scenario.name!r}: {len(planned)} episodes")
        reg = Registry.load(fault_registry(folders[f"s{i}"], scenario.faults, attempts=scenario.attempts, seed=seed))
        scenarios.append({"scenario": scenario.name, "retries": scenario.attempts - 1,
                          **_run_scenario(reg, planned, policy, workers)})

    progress("bad-input suite")
    cases = bad_input_suite(out / "inputs", baseline_reg)
    trust = run_trust_suite(out / "trust", folders["no-faults"] / "registry.yaml", EXAMPLES / "qrcode.png",
                            progress=progress, checks=(*TRUST_CHECKS, *TRAFFIC_CHECKS, *CONVERSATION_CHECKS,
                                                       *ADMISSION_CHECKS))
    results = {
        "policy": policy, "items": len(items), "task_files": [str(f) for f in files],
        "fault_scenarios": scenarios,
        "bad_inputs": [{**asdict(c), "ok": c.ok} for c in cases],
        "inputs_tried": len(cases), "inputs_ok": sum(c.ok for c in cases),
        "trust_boundary": [asdict(c) for c in trust],
        "trust_skipped": sum(c.skipped is not None for c in trust),
        "lost": sum(s.get("lost", 0) for s in scenarios),
    }
    results["passed"] = (results["lost"] == 0 and results["inputs_ok"] == results["inputs_tried"]
                         and all(c.ok or c.skipped is not None for c in trust)
                         and all(s.get("completed", s["episodes"]) == s["episodes"] for s in scenarios))
    (out / "reliability.json").write_text(json.dumps(results, indent=2, ensure_ascii=False))
    (out / "reliability.md").write_text(_markdown(results))
    return results


def _markdown(r: dict) -> str:
    skipped = f", trust checks skipped: {r['trust_skipped']}" if r["trust_skipped"] else ""
    lines = ["# Reliability report", "",
             f"Policy `{r['policy']}`, {r['items']} distinct items, fast local experts, expert cache off. "
             f"Passed: **{'yes' if r['passed'] else 'NO'}** (episodes lost: {r['lost']}{skipped}).", "",
             "## Expert faults", "",
             "| scenario | retries | episodes | completed | answered | no-answer | lost | accuracy | faults injected "
             "| breaker trips | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in r["fault_scenarios"]:
        faults = ", ".join(f"{k} {v}" for k, v in s.get("faults_injected", {}).items()) or "-"
        lines.append(f"| {s['scenario']} | {s.get('retries', '-')} | {s['episodes']} | "
                     f"{s.get('completed', s['episodes'])} | {s.get('answered', '-')} | {s.get('no_answer', '-')} | "
                     f"{s.get('lost', 0)} | {s['accuracy']:.3f} | {faults} | {s.get('breaker_trips', '-')} | "
                     f"{s.get('wall_s', '-')} |")
    lines += ["", f"## Bad inputs ({r['inputs_ok']}/{r['inputs_tried']} as expected)", "",
              "| category | input | expected | outcome | detail |", "|---|---|---|---|---|"]
    for c in r["bad_inputs"]:
        detail = c["detail"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {c['category']} | {c['case']} | {c['expected']} | {c['outcome']} | {detail} |")
    trust = r["trust_boundary"]
    ran = [c for c in trust if c["skipped"] is None]
    lines += ["", f"## Trust boundary ({sum(c['ok'] for c in ran)}/{len(ran)} held"
              f"{f', {len(trust) - len(ran)} skipped' if len(ran) < len(trust) else ''})", "",
              "| attack | must | held | detail |", "|---|---|---|---|"]
    for c in trust:
        held = "skipped" if c["skipped"] is not None else "yes" if c["ok"] else "NO"
        lines.append(f"| {c['attack']} | {c['must']} | {held} | {c['detail'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"
