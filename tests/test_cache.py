"""The expert-call cache: real OCR calls replayed from disk, corrupt entries detected, opt-out respected."""

from __future__ import annotations

import pytest
from PIL import Image, ImageDraw

from maestro_graph.cache import ExpertCache
from maestro_graph.registry.config import ModelCard
from maestro_graph.registry.handles import BoundExpert, ExpertHandle, Ledger


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
    (entry,) = tmp_path.glob("*/*.pkl")
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
    assert cache.stats.hits == cache.stats.misses == 0 and not list(tmp_path.glob("*/*.pkl"))


def test_step_cache_replays_and_invalidates_on_version_change(tmp_path):
    import shutil
    import textwrap
    from pathlib import Path

    from maestro_graph.registry import Registry
    from maestro_graph.types import Invoke

    skills = tmp_path / "skills"
    shutil.copytree(Path(__file__).resolve().parents[1] / "skills" / "ocr", skills / "ocr")
    reader = skills / "first-line"
    reader.mkdir()
    (reader / "SKILL.md").write_text(textwrap.dedent("""\
        ---
        name: first-line
        description: The first line of text.
        metadata: {tier: "1", requires: "ocr", entry: "skill.py:run"}
        ---
        Read the first line.
        """))
    (reader / "skill.py").write_text(textwrap.dedent("""\
        from maestro_graph.types import SkillResult

        def run(ctx):
            page = ctx.use("ocr")
            return SkillResult(evidence=page.text, answer=page.lines[0].text if page.lines else None)
        """))
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
        return Registry.load(config, cache=cache).run(Invoke("rapidocr", "first-line"), question="q", images=[str(image)])

    first, second = run(), run()
    assert not first.cached and second.cached and second.answer == first.answer
    assert "42.50" in first.answer
    (reader / "skill.py").write_text((reader / "skill.py").read_text() + "\n# changed\n")
    assert not run().cached  # skill code changed: the step is recomputed (the OCR call itself still hits)
    config.write_text(config.read_text().replace('version: "1"', 'version: "2"'))
    hits_before = cache.stats.hits
    third = run()
    assert not third.cached and cache.stats.hits == hits_before  # new model version: nothing replayed
