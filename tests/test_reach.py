"""A registry's reach (knowing when nothing fits): `maestro registry profile` records which pair answered which
calibration question; an episode on a question like those none answered stops before its first call, with the answer
node's marked guess, and one whose first calls answered nothing stops once no pair left answered such questions,
while questions the pairs do answer are routed as before. Real barcode readers and real items."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from maestro_graph.core.tasks import load_task_files
from maestro_graph.doors.cli import app
from maestro_graph.episode.context import MaestroContext
from maestro_graph.episode.graph import build_graph
from maestro_graph.episode.runner import run_episode, run_tasks
from maestro_graph.errors import ConfigError
from maestro_graph.policy import ActionSpace, Distribution, EpisodeView, make_policy
from maestro_graph.registry import Registry
from maestro_graph.registry.reach import Reach, reach_path
from maestro_graph.types import Answer, Invoke, StopReason

SKILLS = Path(__file__).resolve().parents[1] / "skills"
BARCODES = Path(__file__).parent / "data" / "real" / "barcode"
ASKED = "How many codes around the logo are there in the figure?"
UNREACHED = [
    "How many codes around the logo are drawn in the figure?",
    "How many codes around the logo can you count in this picture?",
    "Count the codes around the logo in the figure: how many are there?",
    "How many codes around the logo does the figure show?",
    "What is the number of codes around the logo in the figure?",
    "How many codes around the logo are in this image?",
    "How many codes around the logo are there in the picture?",
    "How many codes around the logo appear in the figure?",
    "How many codes around the logo do you see in the figure?",
    "How many codes around the logo are shown in the figure?",
    "Give the number of codes around the logo in the figure.",
    "How many codes around the logo can be seen in the image?",
]


def _card(name: str, entry: str) -> dict:
    return {"name": name, "description": f"{name} barcode reader.", "capabilities": ["barcode"],
            "backend": {"type": "python", "entry": entry}, "cost": {"per_call": 0.05}}


READERS = [_card("zxing", "maestro_graph.experts.zxing_barcode:ZXingBarcodeExpert"),
           _card("opencv-barcode", "maestro_graph.experts.opencv_barcode:OpenCVBarcodeExpert")]


def _registry_file(folder: Path, models: list[dict]) -> Path:
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump({"skill_dirs": [str(SKILLS)], "skills": ["barcode-reading", "barcode"],
                                    "models": models, "profile": "profile.json"}))
    return path


@pytest.fixture(scope="module")
def profiled(tmp_path_factory) -> Path:
    """A profiled barcode registry: four real barcode items the readers decode, and twelve counting questions about
    the same images that no reader answers (they name the code, so the readers take them: the reach, not the skill's
    `declines`, is what stops them)."""
    folder = tmp_path_factory.mktemp("reach")
    items = [json.loads(line) for line in (BARCODES / "tasks.jsonl").read_text().splitlines()[:4]]
    for item in items:
        for image in item["images"]:
            (folder / image).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(BARCODES / image, folder / image)
    counting = [{**items[i % 4], "id": f"count-{i}", "question": q, "answer": "3", "answer_type": "number"}
                for i, q in enumerate(UNREACHED)]
    (folder / "calibration.jsonl").write_text("".join(json.dumps(t) + "\n" for t in items + counting))
    result = CliRunner().invoke(app, ["registry", "profile", "--tasks", str(folder / "calibration.jsonl"),
                                      "--registry", str(_registry_file(folder, READERS)),
                                      "--cache-dir", str(folder / "cache")])
    assert result.exit_code == 0, result.output
    assert "some pair answered" in result.output and reach_path(folder / "profile.json").is_file()
    return folder


def test_profiling_writes_the_reach_and_it_separates_what_the_pairs_answer(profiled):
    registry = Registry.load(profiled / "registry.yaml")
    reach = registry.reach
    assert reach is not None and reach.answered.tolist().count(1.0) >= 3 and reach.answered[4:].sum() == 0
    image = [str(BARCODES / json.loads((BARCODES / "tasks.jsonl").read_text().splitlines()[0])["images"][0])]
    assert reach.estimate(ASKED, image, None) < 0.35
    assert reach.estimate(ASKED, [], None) is None  # unlike all: unknown


def test_a_question_out_of_reach_stops_before_any_call_with_a_marked_guess(profiled):
    registry = Registry.load(profiled / "registry.yaml", cache=None)
    graph = build_graph(registry, make_policy("rules"))
    image = [str(BARCODES / json.loads((BARCODES / "tasks.jsonl").read_text().splitlines()[1])["images"][0])]
    floor = MaestroContext(reach_floor=0.35)
    out = run_episode(graph, ASKED, image, ["2", "3", "4"], context=floor)
    assert out.steps == [] and out.stop == StopReason.OUT_OF_REACH and "floor 0.35" in out.stop_reason
    assert out.answer in {"2", "3", "4"} and out.answer_source == "guess"
    # a floor of 0 turns it off: the same question is tried with the readers
    tried = run_episode(graph, ASKED, image, ["2", "3", "4"], context=MaestroContext(reach_floor=0))
    assert tried.steps and tried.stop != StopReason.OUT_OF_REACH
    # what the readers answer is routed as before
    decoded = run_episode(graph, "What is the value encoded in this barcode?", image, context=floor)
    expected = json.loads((BARCODES / "tasks.jsonl").read_text().splitlines()[1])["answer"]
    assert decoded.steps and decoded.answer == expected


def test_neighbours_only_a_declining_skill_answered_say_nothing_of_the_question(profiled):
    """A calibration question answered only by pairs whose skill declines this one is another kind of question:
    counted, it would read as "nothing left answers this" (0.0, a stop); left out, the reach says what the other
    neighbours say, or nothing when none is left."""
    reach = Registry.load(profiled / "registry.yaml").reach
    item = json.loads((BARCODES / "tasks.jsonl").read_text().splitlines()[1])
    image, readers = [str(BARCODES / item["images"][0])], list(reach.pairs)
    assert reach.estimate(item["question"], image, None, readers) > 0.35
    barcodes_only = Reach(reach.features[:4], reach.right[:4], reach.pairs, k=4)  # the four decoded items
    assert barcodes_only.estimate(item["question"], image, None, []) == 0.0
    assert barcodes_only.estimate(item["question"], image, None, [], declined=readers) is None
    # with the counting questions nobody answered among the neighbours, those are what is left
    assert reach.estimate(item["question"], image, None, [], declined=readers) == 0.0


class InOrder:
    """A test policy: calls the given pairs in this order, then answers the best candidate."""

    stochastic = False

    def __init__(self, *pairs: str):
        self.pairs, self.name = pairs, "in-order"

    def distribution(self, view: EpisodeView, space: ActionSpace) -> Distribution:
        untried = [p for p in self.pairs if not view.called(p)]
        if not untried:
            return Distribution.certain(Answer(view.candidates()[0] if view.candidates() else None))
        return Distribution.certain(Invoke(*untried[0].split("@@")))


def test_after_a_call_that_answered_nothing_the_pairs_left_decide_whether_to_go_on(profiled):
    """A Data Matrix code: OpenCV's reader finds nothing, zxing decodes it. Zxing answered questions like this in
    calibration, so the episode goes on to it; in a reach where OpenCV's reader had answered all of them and zxing
    none, the episode stops after OpenCV's empty step instead of trying a pair that never answers such questions."""
    registry = Registry.load(profiled / "registry.yaml")
    item = json.loads((BARCODES / "tasks.jsonl").read_text().splitlines()[0])
    image = [str(BARCODES / item["images"][0])]
    graph = build_graph(registry, InOrder("opencv-barcode@@barcode-reading", "zxing@@barcode-reading"))
    floor = MaestroContext(reach_floor=0.35)
    went_on = run_episode(graph, item["question"], image, context=floor)
    assert [s.answer is None for s in went_on.steps] == [True, False] and went_on.answer == item["answer"]
    reach = registry.reach
    only_opencv = np.asarray([[pair.startswith("opencv-barcode@@") for pair in reach.pairs]], np.float32)
    registry.reach = Reach(reach.features, reach.answered[:, None] * only_opencv, reach.pairs)
    stopped = run_episode(graph, item["question"], image, context=floor)
    assert [s.pair for s in stopped.steps] == ["opencv-barcode@@barcode-reading"] and stopped.answer is None
    assert stopped.stop == StopReason.OUT_OF_REACH and "not yet called" in stopped.stop_reason


def test_after_a_call_the_reach_overrules_a_further_call_never_the_policys_answer(profiled):
    """In a reach where only zxing answered questions like this one, zxing decodes the code: a policy that then
    answers gives its answer (the reach does not take it away and call it a candidate), and one that would call
    OpenCV's reader next is stopped before that call, answering the best candidate."""
    registry = Registry.load(profiled / "registry.yaml")
    item = json.loads((BARCODES / "tasks.jsonl").read_text().splitlines()[0])
    image = [str(BARCODES / item["images"][0])]
    reach = registry.reach
    only_zxing = np.asarray([[pair.startswith("zxing@@") for pair in reach.pairs]], np.float32)
    registry.reach = Reach(reach.features, reach.answered[:, None] * only_zxing, reach.pairs)
    floor = MaestroContext(reach_floor=0.35)
    answered = run_episode(build_graph(registry, InOrder("zxing@@barcode-reading")), item["question"], image,
                           context=floor)
    assert answered.stop == StopReason.POLICY and answered.answer_source == "policy"
    assert answered.answer == item["answer"]
    graph = build_graph(registry, InOrder("zxing@@barcode-reading", "opencv-barcode@@barcode-reading"))
    stopped = run_episode(graph, item["question"], image, context=floor)
    assert [s.pair for s in stopped.steps] == ["zxing@@barcode-reading"] and stopped.stop == StopReason.OUT_OF_REACH
    assert stopped.answer == item["answer"] and stopped.answer_source == "candidate"


def test_the_oracle_is_never_stopped_by_the_reach(profiled):
    registry = Registry.load(profiled / "registry.yaml")
    tasks, _ = load_task_files([profiled / "calibration.jsonl"])
    counting = [t for t in tasks if t.id.startswith("count-")][:1]
    ((_, episode),) = list(run_tasks(registry, counting, "oracle", context=MaestroContext(reach_floor=0.35)))
    assert len(episode.steps) == len(registry.pairs())  # it tried every pair: an upper bound, not a routed policy


def test_an_expert_added_after_profiling_silences_the_reach_only_while_it_may_be_called(profiled, tmp_path):
    """A reader added since the profile (a warning names the file and the pair) may answer what the measured ones
    could not: while it is callable the reach says nothing and the episode calls; once it has been called, the
    measured pairs decide again. A view with fewer pairs keeps the reach."""
    for name in ("profile.json", "profile.reach.safetensors", "calibration.jsonl"):
        shutil.copy(profiled / name, tmp_path / name)
    zbar = {**READERS[0], "name": "zbar-like", "description": "another reader"}
    with pytest.warns(UserWarning, match=rf"reach {tmp_path / 'profile.reach.safetensors'}: pair "
                                         r"zbar-like@@barcode-reading was not measured as it is now"):
        grown = Registry.load(_registry_file(tmp_path, [*READERS, zbar]))
    assert grown.reach is not None and "zbar-like@@barcode-reading" not in grown.reach.pairs
    image = [str(BARCODES / json.loads((BARCODES / "tasks.jsonl").read_text().splitlines()[1])["images"][0])]
    measured = ["zxing@@barcode-reading", "opencv-barcode@@barcode-reading"]
    assert grown.reach.estimate(ASKED, image, None, [*measured, "zbar-like@@barcode-reading"]) is None
    assert grown.reach.estimate(ASKED, image, None, measured) < 0.35
    graph = build_graph(grown, InOrder("zbar-like@@barcode-reading", *measured))
    out = run_episode(graph, ASKED, image, ["2", "3", "4"], context=MaestroContext(reach_floor=0.35))
    assert [s.pair for s in out.steps] == ["zbar-like@@barcode-reading"] and out.stop == StopReason.OUT_OF_REACH
    assert Registry.load(_registry_file(tmp_path, READERS)).without(models={"opencv-barcode"}).reach is not None


def test_a_pair_the_profile_records_as_never_measured_loads_quietly_and_keeps_the_reach_silent(profiled, tmp_path):
    """scripts/merge_profile.py without a part carries a profile over to a registry with one more reader (as the
    packaged default registry gets the training registry's, plus its chat model): the file records that reader as
    measured on no item, so loading warns of nothing, the measured readers' outcomes come back as they were (a
    column-ordered array once came back scrambled), the reach says nothing while the new reader may be called and
    the reader has no figure of its own."""
    zbar = {**READERS[0], "name": "zbar-like", "description": "another reader"}
    grown = _registry_file(tmp_path, [*READERS, zbar])
    subprocess.run([sys.executable, str(Path(__file__).parents[1] / "scripts" / "merge_profile.py"), "--registry",
                    str(grown), "--profile", str(profiled / "profile.json"), "--out", str(tmp_path / "profile.json")],
                   check=True, capture_output=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        registry = Registry.load(grown)
    before = Registry.load(profiled / "registry.yaml").reach
    reach = registry.reach
    assert list(reach.pairs) == [*before.pairs, "zbar-like@@barcode-reading"]
    assert np.array_equal(reach.right[:, :-1], before.right) and np.isnan(reach.right[:, -1]).all()
    image = [str(BARCODES / json.loads((BARCODES / "tasks.jsonl").read_text().splitlines()[1])["images"][0])]
    measured = list(before.pairs)
    assert reach.estimate(ASKED, image, None, measured) < 0.35
    assert reach.estimate(ASKED, image, None, [*measured, "zbar-like@@barcode-reading"]) is None
    assert set(reach.pair_accuracy(ASKED, image, None, registry.pair_ids())) == set(measured)


def test_an_expert_profiled_on_a_sample_joins_the_reach_in_its_items_rows_and_is_judged_on_questions_like_each(
        profiled, tmp_path):
    """A reader added to a profiled registry, profiled alone on a sample of the calibration items plus one item of
    its own, and merged by scripts/merge_profile.py: the sampled items fill their own rows (a slow expert measured on
    a sample keeps the reach whole), its own item is a row of its own, each pair's accuracy on questions like this one
    comes from the items it was measured on (a question identical to a calibration item never reads that item), and
    the reach over every pair reads the items they were all measured on. A reader the part ran beside the new one
    (as a chat skill's OCR model runs beside the chat model) keeps the base's entry and its rows on every item."""
    for name in ("profile.json", "profile.reach.safetensors"):
        shutil.copy(profiled / name, tmp_path / name)
    lines = (profiled / "calibration.jsonl").read_text().splitlines()
    own = {**json.loads(lines[4]), "id": "count-own", "question": "How many rings surround the code in this figure?"}
    (tmp_path / "own.jsonl").write_text("\n".join(lines[2:10] + [json.dumps(own)]) + "\n")
    for image in {i for line in lines for i in json.loads(line)["images"]}:
        (tmp_path / image).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(profiled / image, tmp_path / image)
    zbar = {**READERS[0], "name": "zbar-like", "description": "another reader"}
    part = tmp_path / "part"
    part.mkdir()
    result = CliRunner().invoke(app, ["registry", "profile", "--tasks", str(tmp_path / "own.jsonl"),
                                      "--registry", str(_registry_file(part, [READERS[0], zbar])),
                                      "--cache-dir", str(profiled / "cache")])
    assert result.exit_code == 0, result.output
    grown_file = _registry_file(tmp_path, [*READERS, zbar])
    subprocess.run([sys.executable, str(Path(__file__).parents[1] / "scripts" / "merge_profile.py"), "--registry",
                    str(grown_file), "--part", str(part / "profile.json"), "--profile", str(tmp_path / "profile.json")],
                   check=True, capture_output=True)
    grown = Registry.load(grown_file)
    new, old = "zbar-like@@barcode-reading", ["zxing@@barcode-reading", "opencv-barcode@@barcode-reading"]
    assert grown.reach is not None and list(grown.reach.pairs) == [*old, new]
    measured = ~np.isnan(grown.reach.right)
    assert measured.shape == (16 + 1, 3) and measured[:16, :2].all() and not measured[16, :2].any()
    base = json.loads((profiled / "profile.json").read_text())["pairs"]
    merged = json.loads((tmp_path / "profile.json").read_text())["pairs"]
    assert [e for e in merged if e["pair"] in old] == [e for e in base if e["pair"] in old]
    assert np.array_equal(grown.reach.right[:16, :2], Registry.load(profiled / "registry.yaml").reach.right)
    assert measured[2:10, 2].all() and measured[16, 2] and measured[:, 2].sum() == 9
    barcode = json.loads(lines[2])
    image = [str(profiled / barcode["images"][0])]
    reads = grown.reach.pair_accuracy(barcode["question"], image, None, [*old, new])
    counts = grown.reach.pair_accuracy(ASKED, image, ["2", "3", "4"], [*old, new])
    assert set(reads) == set(counts) == {*old, new}
    assert reads[new] > 0.5 and reads["zxing@@barcode-reading"] > 0.5 and max(counts.values()) == 0.0
    alone = Reach(grown.reach.features[2:4], np.ones((2, 1), np.float32), {new: "f"})
    assert alone.pair_accuracy(barcode["question"], image, None, [new]) == {new: 1.0}  # the other item only
    assert Reach(alone.features[:1], alone.right[:1], alone.pairs).pair_accuracy(
        barcode["question"], image, None, [new]) == {}  # its own item is never read
    shared = Reach(grown.reach.features[2:10], grown.reach.right[2:10], grown.reach.pairs)
    assert grown.reach.estimate(ASKED, image, None, [*old, new]) == shared.estimate(ASKED, image, None, [*old, new])
    assert grown.reach.estimate(ASKED, image, None, old) < 0.35
    view = EpisodeView(barcode["question"], tuple(image), None, (), 4, 10.0)
    assert ActionSpace.build(grown, view).accuracy[new] == reads[new]  # what the neural policy reads
    assert new not in ActionSpace.build(grown.without(unprofiled={new}), view).accuracy  # hidden with its profile


def test_no_reach_file_is_unknown_and_a_damaged_one_is_a_config_error_naming_it(profiled, tmp_path):
    shutil.copy(profiled / "profile.json", tmp_path / "profile.json")
    assert Registry.load(_registry_file(tmp_path, READERS)).reach is None  # a profile from before reaches
    reach_path(tmp_path / "profile.json").write_bytes(b"not safetensors")
    with pytest.raises(ConfigError) as caught:
        Registry.load(_registry_file(tmp_path, READERS))
    assert "profile.reach.safetensors" in str(caught.value) and "maestro registry profile" in str(caught.value)


def test_a_reach_round_trips_and_refuses_features_of_another_size(tmp_path):
    right = np.asarray([[1, 0], [0, 0], [0, 1]], np.float32)
    reach = Reach(np.eye(3, 392, dtype=np.float32), right, {"a@@b": "f1", "c@@b": "f2"})
    reach.save(tmp_path / "r.safetensors")
    back = Reach.read(tmp_path / "r.safetensors", {"a@@b": "f1", "c@@b": "f2"})
    assert back is not None and back.right.tolist() == right.tolist() and back.answered.tolist() == [1, 0, 1]
    assert back.k == reach.k and list(back.pairs) == ["a@@b", "c@@b"]
    Reach(np.eye(3, 10, dtype=np.float32), reach.right, reach.pairs).save(tmp_path / "small.safetensors")
    with pytest.raises(ConfigError) as caught:
        Reach.read(tmp_path / "small.safetensors", {"a@@b": "f1"})
    assert caught.value.field == "features"


def test_a_server_with_a_reach_floor_answers_out_of_reach_questions_without_calls(profiled):
    """`maestro serve --reach-floor 0.35` (ServeSettings.reach_floor), on a real loopback server: the operator's
    setting reaches every episode, and the trace says why nothing was called."""
    import openai
    from servers import data_url

    from maestro_graph.doors.serve import ServeSettings, create_app
    from maestro_graph.doors.serve.loopback import running_app

    image = BARCODES / json.loads((BARCODES / "tasks.jsonl").read_text().splitlines()[1])["images"][0]
    messages = [{"role": "user", "content": [
        {"type": "text", "text": ASKED},
        {"type": "image_url", "image_url": {"url": data_url(image)}}]}]
    app = create_app(Registry.load(profiled / "registry.yaml"), ServeSettings(policy="rules", reach_floor=0.35))
    with running_app(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        trace = client.chat.completions.create(model="maestro", messages=messages).model_extra["maestro"]
    assert trace["steps"] == [] and trace["stop_reason"].startswith("out of reach")
