"""The expert-call cache: real OCR calls replayed from disk, corrupt entries detected, opt-out respected; entries
are JSON, so a planted pickle never runs, and every cached type comes back equal."""

from __future__ import annotations

import json
import pickle
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from maestro_graph.cache.store import ExpertCache
from maestro_graph.errors import ExpertFailure
from maestro_graph.experts.opencv_vision import Circle, CirclePair, Color, Crossing, Grid, Polygon
from maestro_graph.experts.protocols import Barcode, ChatReply, TextBox
from maestro_graph.operations.reliability.target import PlantedPickle
from maestro_graph.registry import Registry
from maestro_graph.registry.config import ModelCard
from maestro_graph.registry.handles import BoundExpert, ExpertHandle, Ledger
from maestro_graph.types import ErrorKind, Invoke, Step


def _card(cacheable: bool = True) -> ModelCard:
    return ModelCard.model_validate({
        "name": "rapidocr", "description": "PP-OCR", "capabilities": ["ocr"], "cacheable": cacheable,
        "cost": {"per_call": 0.5},
        "backend": {"type": "python", "entry": "maestro_graph.experts.rapid_ocr:RapidOCRExpert"},
    })


def _image(text: str) -> Image.Image:
    # RapidOCR's detector scales the short side up to 736 px: a 360x80 strip becomes 3312x736 (5 s a call here)
    image = Image.new("RGB", (736, 736), "white")
    ImageDraw.Draw(image).text((10, 25), text, fill="black", font_size=32)
    return image


def test_second_call_is_a_hit_with_the_same_result(tmp_path):
    cache = ExpertCache(tmp_path)
    ledger = Ledger()
    expert = BoundExpert(ExpertHandle(_card(), cache), ledger)
    first = expert.ocr(_image("TOTAL 42.50"))
    second = expert.ocr(_image("TOTAL 42.50"))
    assert "42.50" in " ".join(b.text for b in first)
    assert second == first
    assert (cache.stats.hits, cache.stats.misses) == (1, 1)
    assert ledger.calls[1].cached and ledger.calls[1].cost == 0.5
    expert.ocr(_image("OTHER 7"))  # other pixels, other key
    assert cache.stats.misses == 2
    assert cache.clear() == 2


def test_corrupt_entry_is_reported_and_recomputed(tmp_path):
    cache = ExpertCache(tmp_path)
    expert = BoundExpert(ExpertHandle(_card(), cache), Ledger())
    expected = expert.ocr(_image("HELLO"))
    (entry,) = tmp_path.glob("*/*.json")
    entry.write_bytes(b"\x80\x04 torn write")
    with pytest.warns(UserWarning, match="corrupt"):
        again = expert.ocr(_image("HELLO"))
    assert again == expected and cache.stats.corrupt == 1
    assert cache.get(entry.stem)[0]  # rewritten with a good value


def test_card_can_opt_out(tmp_path):
    cache = ExpertCache(tmp_path)
    expert = BoundExpert(ExpertHandle(_card(cacheable=False), cache), Ledger())
    expert.ocr(_image("NO CACHE"))
    expert.ocr(_image("NO CACHE"))
    assert cache.stats.hits == cache.stats.misses == 0 and not list(tmp_path.glob("*/*.json"))


def _tier1_skill(tmp_path: Path, tier2: str, name: str, description: str, code: str) -> Path:
    """A skills folder beside `tmp_path`'s registry file: the package's tier-2 skill `tier2` and a tier-1 skill
    `name` (requires ocr) whose entry is `code`."""
    skills = tmp_path / "skills"
    shutil.copytree(Path(__file__).resolve().parents[1] / "skills" / tier2, skills / tier2)
    folder = skills / name
    folder.mkdir()
    (folder / "SKILL.md").write_text(textwrap.dedent(f"""\
        ---
        name: {name}
        description: {description}
        metadata: {{tier: "1", requires: "ocr", entry: "skill.py:run"}}
        ---
        {description}
        """))
    (folder / "skill.py").write_text(textwrap.dedent(code))
    return folder


def test_step_cache_replays_and_invalidates_on_version_change(tmp_path):
    reader = _tier1_skill(tmp_path, "ocr", "first-line", "The first line of text.", """\
        from maestro_graph.types import SkillResult

        def run(ctx):
            page = ctx.use("ocr")
            return SkillResult(evidence=page.text, answer=page.lines[0].text if page.lines else None)
        """)
    config = tmp_path / "reg.yaml"
    config.write_text(textwrap.dedent("""\
        skill_dirs: [skills]
        models:
          - name: rapidocr
            description: PP-OCR
            capabilities: [ocr]
            version: "1"
            backend: {type: python, entry: "maestro_graph.experts.rapid_ocr:RapidOCRExpert"}
        """))
    image = tmp_path / "text.png"
    _image("TOTAL 42.50").save(image)
    cache = ExpertCache(tmp_path / "cache")

    def run():
        return Registry.load(config, cache=cache).run(Invoke("rapidocr", "first-line"), question="q",
                                                      images=[str(image)])

    first, second = run(), run()
    assert not first.cached and second.cached and second.answer == first.answer
    assert "42.50" in first.answer
    (reader / "skill.py").write_text((reader / "skill.py").read_text() + "\n# changed\n")
    assert not run().cached  # skill code changed: the step is recomputed (the OCR call itself still hits)
    config.write_text(config.read_text().replace('version: "1"', 'version: "2"'))
    hits_before = cache.stats.hits
    third = run()
    assert not third.cached and cache.stats.hits == hits_before  # new model version: nothing replayed


# -- entries are JSON: nothing read from the cache folder is unpickled --------------------------------------------
QR = Path(__file__).resolve().parents[1] / "examples" / "qrcode.png"


def _zxing(cache: ExpertCache) -> BoundExpert:
    card = ModelCard.model_validate({
        "name": "zxing", "description": "zxing-cpp", "capabilities": ["barcode"], "cost": {"per_call": 0.05},
        "backend": {"type": "python", "entry": "maestro_graph.experts.zxing_barcode:ZXingBarcodeExpert"},
    })
    return BoundExpert(ExpertHandle(card, cache), Ledger())


def test_planted_pickle_is_never_unpickled(tmp_path):
    proof = tmp_path / "proof"
    pickle.loads(pickle.dumps(PlantedPickle(proof)))
    assert proof.exists()  # the payload is live: unpickling it would have run code
    cache = ExpertCache(tmp_path / "cache")
    expert = _zxing(cache)
    image = Image.open(QR)
    expected = expert.decode(image)
    assert [b.text for b in expected] == ["Wikipedia"]
    (entry,) = (tmp_path / "cache").glob("*/*.json")
    marker = tmp_path / "marker"

    entry.write_bytes(pickle.dumps(PlantedPickle(marker)))  # at the path of the real key
    with pytest.warns(UserWarning, match="corrupt"):
        assert expert.decode(image) == expected
    assert not marker.exists() and cache.stats.corrupt == 1 and cache.stats.hits == 0
    assert json.loads(entry.read_text())["format"] == 1  # recomputed and rewritten as JSON

    entry.unlink()
    entry.with_suffix(".pkl").write_bytes(pickle.dumps(PlantedPickle(marker)))  # an entry of the old format
    assert expert.decode(image) == expected
    assert not marker.exists() and cache.stats.hits == 0 and cache.stats.corrupt == 1  # never read at all
    assert expert.decode(image) == expected and cache.stats.hits == 1  # the JSON entry written beside it is
    assert cache.clear() == 2  # both formats removed


ROUND_TRIPS = {
    "text": "Wikipedia é 这",
    "strings": ["a", "b"],
    "text boxes": [TextBox("TOTAL 42.50", (1.0, 2.5, 30.0, 12.0), 0.93)],
    "chat reply": ChatReply("yes", prompt_tokens=12, completion_tokens=1),
    "barcodes": [Barcode("Wikipedia", "QRCode", (0.0, 0.0, 10.0, 10.0)), Barcode("123", "EAN13")],
    "colors": [Color("red", (250, 3, 4), 0.5)],
    "circle pairs": [CirclePair(Circle(1.0, 2.0, 3.0, "red", True, 0.95), Circle(4.0, 5.0, 6.0, "blue", False, 1.0),
                                -1.5)],
    "polygons": [Polygon(((0.0, 0.0), (1.0, 0.0), (0.5, 1.0)), "green", 0.9)],
    "crossings": [Crossing(3.5, 4.25)],
    "grid": Grid((1.0, 2.0, 3.0), ()),
    "step": Step(model="rapidocr", skill="text-reading", evidence="text: 42", answer="42", confidence=0.8, cost=0.5,
                 calls=[{"model": "rapidocr", "method": "ocr", "cost": 0.5, "latency_s": 0.1, "error": None,
                         "cached": False}]),
    "failed step": Step(model="zxing", skill="barcode-reading", error="image x: empty", error_kind=ErrorKind.INPUT),
    "nested": {"a": (1, 2.5, None, True), 3: [{"b": "c"}], (1, "x"): -0.0},
    "numbers": [1, 2**70, 1.5e-300, float("inf"), False],
    "float array": np.arange(12, dtype=np.float32).reshape(3, 4) / 7,
    "big-endian array": np.arange(5, dtype=">i8"),
    "bool array": np.array([[True, False]]),
    "numpy scalars": [np.float64(0.1), np.int64(-3), np.uint8(200)],
    "nothing": None,
}


def _same(a, b) -> bool:
    if isinstance(a, (np.ndarray, np.generic)):
        return type(a) is type(b) and a.dtype == b.dtype and np.shape(a) == np.shape(b) and np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("name", list(ROUND_TRIPS))
def test_each_cached_type_round_trips_through_json(tmp_path, name):
    cache = ExpertCache(tmp_path)
    cache.put("ab" + name.replace(" ", "-"), ROUND_TRIPS[name])
    (entry,) = tmp_path.glob("*/*.json")
    json.loads(entry.read_text())  # plain JSON on disk
    hit, value = ExpertCache(tmp_path).get("ab" + name.replace(" ", "-"))
    assert hit and _same(ROUND_TRIPS[name], value), value


@pytest.mark.parametrize("value", [object(), [1, {2, 3}], np.array(["a"], dtype=object), np.ma.masked_array([1, 2]),
                                   lambda: None])
def test_a_value_that_is_not_json_runs_uncached(tmp_path, value):
    cache = ExpertCache(tmp_path)
    cache.put("abcd", value)
    assert cache.get("abcd") == (False, None) and cache.stats.uncacheable == 1 and not list(tmp_path.rglob("*.json"))


@pytest.mark.parametrize("entry", [
    '{"format": 1, "value": {"t": "os.system", "v": {"command": "touch marker"}}}',
    '{"format": 1, "value": {"t": "subprocess.Popen", "v": {}}}',
    '{"format": 1, "value": {"t": "ndarray", "dtype": "|O", "shape": [1], "data": "AAAAAAAAAAA="}}',
    '{"format": 1, "value": {"t": "ndarray", "dtype": "<f4", "shape": [3], "data": "AAAA"}}',
    '{"format": 1, "value": {"t": "maestro_graph.experts.protocols.TextBox", "v": {"text": "x"}}}',
    '{"format": 1, "value": {"t": "dict", "v": 3}}',
    '{"format": 2, "value": "from the future"}',
    '["format", 1]',
    '{"format": 1, "value": "cut in the middle',
    b'{"format": 1, "value": "\xff"}',
])
def test_a_foreign_entry_is_corrupt(tmp_path, entry):
    cache = ExpertCache(tmp_path)
    cache.put("abcd", "good")
    (path,) = tmp_path.glob("*/*.json")
    path.write_bytes(entry.encode() if isinstance(entry, str) else entry)
    with pytest.warns(UserWarning, match="corrupt"):
        assert cache.get("abcd") == (False, None)
    assert cache.stats.corrupt == 1 and not path.exists()


def test_a_step_that_met_a_passing_failure_is_not_cached(tmp_path):
    """A skill may answer around a failed tier-2 call (visual-math values an option it could not evaluate as
    unknown). A timeout or a dropped connection says nothing about the input, so that degraded step is recomputed
    next time; a crash on the input (an expression the calculator cannot read) is part of the outcome and is
    replayed."""
    _tier1_skill(tmp_path, "calculator", "valuer", "The question's value (by the calculator's model), or unknown.", """\
        from maestro_graph.errors import ExpertError
        from maestro_graph.types import SkillResult

        def run(ctx):
            try:
                return SkillResult(evidence="valued", answer=str(ctx.use("calculator", expression=ctx.question)))
            except ExpertError as exc:
                return SkillResult(evidence=f"unknown: {exc}", answer=None)
        """)
    config = tmp_path / "reg.yaml"
    card = textwrap.dedent("""\
        skill_dirs: [skills]
        models:
          - name: rapidocr
            description: PP-OCR (the pair's model; this skill never reads)
            capabilities: [ocr]
            backend: {{type: python, entry: "maestro_graph.experts.rapid_ocr:RapidOCRExpert"}}
          - name: sympy
            description: SymPy
            capabilities: [math]
            {faults}
            backend: {{type: python, entry: "maestro_graph.experts.sympy_math:SympyMathExpert"}}
        """)
    cache = ExpertCache(tmp_path / "cache")

    def run(question: str, faults: str = ""):
        config.write_text(card.format(faults=faults))
        return Registry.load(config, cache=cache).run(Invoke("rapidocr", "valuer"), question=question, images=[])

    failed = run("2*(3+4)", faults="faults: {error_rate: 1.0}")  # a dropped connection on every call
    assert failed.error is None and failed.answer is None and "unknown" in failed.evidence  # answered around it
    recovered = run("2*(3+4)")
    assert not recovered.cached and recovered.answer == "14"  # the degraded step was not replayed
    assert run("2*(3+4)").cached
    unreadable = run("((")
    assert unreadable.answer is None and run("((").cached  # the input's own failure is the outcome
    config.write_text(card.format(faults="faults: {error_rate: 1.0}\n    breaker: {failures: 1, open_s: 30}"))
    registry = Registry.load(config, cache=cache)
    registry.run(Invoke("rapidocr", "valuer"), question="1+1", images=[])  # a dropped connection opens sympy's breaker
    refused = registry.run(Invoke("rapidocr", "valuer"), question="2+2", images=[])
    assert refused.answer is None and refused.calls[-1]["failure"] == ExpertFailure.BREAKER_OPEN  # in the trace
    assert not run("2+2").cached and run("2+2").answer == "4"


def test_a_cache_folder_that_cannot_be_written_or_read_changes_no_answer(tmp_path, caplog):
    from test_scale import BARCODE_TASKS, _barcode_registry, _records
    from typer.testing import CliRunner

    from maestro_graph.doors.cli import app

    registry = _barcode_registry(tmp_path)
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # no folder can be made under a file, whoever runs the test (root included)

    def predict(name: str, *cache: str) -> str:
        result = CliRunner().invoke(app, ["predict", "-t", str(BARCODE_TASKS), "--limit", "3", "-p", "rules",
                                          "--workers", "1", "--registry", str(registry), "-o",
                                          str(tmp_path / name / "predictions" / "rules.jsonl"), *cache])
        assert result.exit_code == 0, result.output  # a cache that fails is no failed item
        return result.output

    predict("uncached", "--no-cache")
    with caplog.at_level("WARNING", logger="maestro.cache"):
        output = predict("unwritable", "--cache-dir", str(blocked / "cache"))
    told = [r for r in caplog.records if r.name == "maestro.cache"]
    assert len(told) == 1 and "NotADirectoryError" in told[0].getMessage()  # once, for every read and write
    assert "expert-cache reads or writes failed" in " ".join(output.split())
    counters = (tmp_path / "unwritable" / "predictions" / "rules.metrics.prom").read_text()
    (errors,) = [float(line.split()[1]) for line in counters.splitlines()
                 if line.startswith("maestro_cache_errors_total ")]
    assert errors > 0

    predict("filled", "--cache-dir", str(tmp_path / "cache"))  # entries that then cannot be read nor replaced
    entries = list((tmp_path / "cache").glob("*/*.json"))
    assert entries
    for entry in entries:
        entry.unlink()
        entry.mkdir()
    predict("unreadable", "--cache-dir", str(tmp_path / "cache"))
    assert _records(tmp_path / "uncached") == _records(tmp_path / "unwritable") == _records(tmp_path / "unreadable")
