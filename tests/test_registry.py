"""Registry: config validation, skill folder validation, and the computed action space."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from maestro_graph.errors import ConfigError, SkillError
from maestro_graph.registry import Registry, load_skill
from maestro_graph.types import Invoke

SKILLS = Path(__file__).resolve().parents[1] / "skills"


def write_skill(root: Path, name: str, *, front: str | None = None,
                code: str = "def run(ctx):\n    return None\n") -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    front = front if front is not None else textwrap.dedent(f"""\
        name: {name}
        description: A test skill.
        metadata:
          tier: "1"
          requires: "ocr"
          entry: "skill.py:run"
        """)
    (folder / "SKILL.md").write_text(f"---\n{front}---\nInstructions for {name}.\n")
    (folder / "skill.py").write_text(code)
    return folder


def write_config(path: Path, models: str, skill_dirs: list[str], extra: str = "") -> Path:
    path.write_text(f"skill_dirs: {skill_dirs}\n{extra}models:\n{textwrap.indent(textwrap.dedent(models), '  ')}")
    return path


OCR_MODELS = """\
- name: rapidocr
  description: PP-OCR text reader.
  capabilities: [ocr]
  backend: {type: python, entry: "maestro_graph.experts.rapid_ocr:RapidOCRExpert"}
- name: tesseract
  description: Tesseract text reader.
  capabilities: [ocr]
  backend: {type: python, entry: "maestro_graph.experts.tesseract_ocr:TesseractExpert"}
- name: solver
  description: A math model.
  capabilities: [math]
  backend: {type: python, entry: "maestro_graph.experts.sympy_math:SympyMathExpert"}
"""


def test_pairs_are_computed_from_capabilities(tmp_path):
    write_skill(tmp_path / "skills", "read-a")
    write_skill(tmp_path / "skills", "solve-b", front=textwrap.dedent("""\
        name: solve-b
        description: Needs math.
        metadata:
          tier: "1"
          requires: "math"
          entry: "skill.py:run"
        """))
    write_skill(tmp_path / "skills", "helper-c", front=textwrap.dedent("""\
        name: helper-c
        description: A tier-2 block.
        metadata:
          tier: "2"
          requires: "ocr"
          entry: "skill.py:run"
        """))
    reg = Registry.load(write_config(tmp_path / "reg.yaml", OCR_MODELS, ["skills"]))
    assert sorted(reg.pair_ids()) == ["rapidocr@@read-a", "solver@@solve-b", "tesseract@@read-a"]
    assert reg.invalid_reason(Invoke("solver", "read-a")).startswith("solver@@read-a is not a valid pair")
    assert "unknown skill 'helper-c'" in reg.invalid_reason(Invoke("rapidocr", "helper-c"))  # tier 2 is not an action
    assert "unknown model 'gpt-9'" in reg.invalid_reason(Invoke("gpt-9", "read-a"))
    assert reg.invalid_reason(Invoke("rapidocr", "read-a")) is None


def test_unavailable_model_is_reported_and_left_out_of_pairs(tmp_path):
    write_skill(tmp_path / "skills", "read-a")
    models = OCR_MODELS + """\
- name: ghost
  description: Needs a missing program.
  capabilities: [ocr]
  backend: {type: python, entry: "fakes:MissingBinaryExpert"}
"""
    reg = Registry.load(write_config(tmp_path / "reg.yaml", models, ["skills"]))
    ghost = next(m for m in reg.describe()["models"] if m["name"] == "ghost")
    assert ghost["available"] is False and "nonexistent-binary" in ghost["reason"]
    assert "ghost@@read-a" not in reg.pair_ids()
    step = reg.run(Invoke("ghost", "read-a"), question="q", images=[])
    assert step.error_kind == "policy" and "unavailable" in step.error


@pytest.mark.parametrize(
    ("front", "field"),
    [
        ("name: Bad_Name\ndescription: d\nmetadata: {tier: \"1\", requires: ocr, entry: \"skill.py:run\"}\n", "name"),
        ("name: other\ndescription: d\nmetadata: {tier: \"1\", requires: ocr, entry: \"skill.py:run\"}\n", "name"),
        ("name: s\nmetadata: {tier: \"1\", requires: ocr, entry: \"skill.py:run\"}\n", "description"),
        ("name: s\ndescription: d\nmetadata: {tier: \"3\", requires: ocr, entry: \"skill.py:run\"}\n", "metadata.tier"),
        ("name: s\ndescription: d\nmetadata: {tier: \"1\", requires: \"\", entry: \"skill.py:run\"}\n",
         "metadata.requires"),
        ("name: s\ndescription: d\nmetadata: {tier: \"1\", requires: ocr, entry: \"nope.py:run\"}\n", "metadata.entry"),
        ("name: s\ndescription: d\ntier: 1\nmetadata: {tier: \"1\", requires: ocr, entry: \"skill.py:run\"}\n", "tier"),
    ],
)
def test_invalid_skill_names_file_and_field(tmp_path, front, field):
    folder = write_skill(tmp_path, "s", front=front)
    with pytest.raises(SkillError) as info:
        load_skill(folder)
    assert str(folder / "SKILL.md") in str(info.value)
    assert field in info.value.field


def test_missing_skill_md_and_bad_front_matter(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SkillError, match="missing SKILL.md"):
        load_skill(tmp_path / "empty")
    folder = write_skill(tmp_path, "s")
    (folder / "SKILL.md").write_text("no front matter here")
    with pytest.raises(SkillError, match="front matter"):
        load_skill(folder)


def test_skill_code_loads_lazily_and_bad_entry_is_named(tmp_path):
    folder = write_skill(tmp_path, "s", code="def other(ctx):\n    return None\n")
    spec = load_skill(folder)  # front matter only: no import yet
    assert spec.instructions == "Instructions for s."
    with pytest.raises(SkillError, match="has no function 'run'"):
        spec.run  # noqa: B018


@pytest.mark.parametrize(
    ("models", "extra", "field"),
    [
        ("- name: x\n  description: d\n  capabilities: [ocr]\n  backend: {type: grpc}\n", "", "models.0.backend"),
        ("- name: x\n  capabilities: [ocr]\n  backend: {type: python, entry: \"a.b:C\"}\n", "", "models.0.description"),
        ("- name: x\n  description: d\n  capabilities: [ocr]\n"
         "  backend: {type: python, entry: \"maestro_graph.experts.nope:C\"}\n",
         "", "models.0.backend.entry"),
        ("- name: x\n  description: d\n  capabilities: [ocr]\n"
         "  backend: {type: python, entry: \"maestro_graph.experts.rapid_ocr:Nope\"}\n",
         "", "models.0.backend.entry"),
        ("- name: x\n  description: d\n  capabilities: [ocr]\n  timeout_s: -1\n"
         "  backend: {type: python, entry: \"a:B\"}\n",
         "", "models.0.timeout_s"),
        (OCR_MODELS, "skills: [no-such-skill]\n", "skills"),
    ],
)
def test_invalid_config_names_file_and_field(tmp_path, models, extra, field):
    write_skill(tmp_path / "skills", "read-a")
    path = write_config(tmp_path / "reg.yaml", models, ["skills"], extra)
    with pytest.raises(ConfigError) as info:
        Registry.load(path)
    assert str(path) in str(info.value)
    assert field in (info.value.field or "")


def test_missing_config_file_and_duplicate_names(tmp_path):
    with pytest.raises(ConfigError, match="no such registry config"):
        Registry.load(tmp_path / "missing.yaml")
    write_skill(tmp_path / "skills", "read-a")
    dup = OCR_MODELS + OCR_MODELS.split("- name: tesseract")[0]
    with pytest.raises(ConfigError, match="unique"):
        Registry.load(write_config(tmp_path / "reg.yaml", dup, ["skills"]))


def test_default_registry_skills_are_valid():
    reg = Registry.load()
    tier1 = {s.name for s in reg.tier1}
    assert {"ocr", "zoom", "shapes", "calculator", "barcode"} <= set(reg.skills) - tier1
    assert {"chart-qa", "table-qa", "document-fields", "counting", "visual-math", "text-reading",
            "barcode-reading", "general-qa"} <= tier1
    for spec in reg.skills.values():
        assert callable(spec.run), spec.name
        assert spec.instructions, f"{spec.name}: SKILL.md body is empty"
    # every tier-1 skill has at least one available model in the default registry, but those only a vision-chat
    # model (none is packaged: docs/vision-language.md) carries out, which are listed as unavailable with the reason
    vision_only = {s.name for s in reg.tier1 if s.requires == ("vision-chat",)}
    assert vision_only == {"visual-qa"} and "vision-chat" in reg.skill_unavailable_reason(reg.skills["visual-qa"])
    assert {p.skill.name for p in reg.pairs()} == tier1 - vision_only


STAMP_EXPERT = '''\
from maestro_graph.experts.protocols import TextBox


class StampOCR:
    """Reads the stamp on a parcel (a user's expert, outside the package)."""

    def ocr(self, image):
        return [TextBox("STAMP", (0, 0, image.width, image.height), 1.0)]
'''


def _maestro(*args: str, pythonpath: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run([str(Path(sys.executable).parent / "maestro"), *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_a_user_registry_extends_the_packaged_one_with_an_expert_beside_it(tmp_path):
    """Through the CLI: a registry outside the package builds on the packaged one
    (`extends: default`) with one model card whose python expert lies beside the file. Without PYTHONPATH the error
    says to set it (and to what); with it the registry has the 7 packaged models and the new one, the packaged
    skills, and pairs for the new expert; nothing was copied and no path points into the package."""
    from maestro_graph.registry.config import default_config_path, load_config

    (tmp_path / "stamp_expert.py").write_text(STAMP_EXPERT)
    (tmp_path / "mine.yaml").write_text(textwrap.dedent("""\
        extends: default
        models:
          - name: stamp-ocr
            description: Reads the stamp on a parcel.
            capabilities: [ocr]
            backend: {type: python, entry: "stamp_expert:StampOCR"}
        """))
    refused = _maestro("registry", "show", "--json", "-r", str(tmp_path / "mine.yaml"))
    assert refused.returncode != 0
    assert "no module 'stamp_expert' for model 'stamp-ocr'" in " ".join(refused.stderr.split())
    assert f"PYTHONPATH={tmp_path}" in refused.stderr.replace("\n", "")

    shown = _maestro("registry", "show", "--json", "-r", str(tmp_path / "mine.yaml"), pythonpath=str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)
    packaged = load_config(default_config_path())
    assert [m["name"] for m in info["models"]] == [m.name for m in packaged.models] + ["stamp-ocr"]
    assert len(packaged.models) == 7
    assert {s["name"] for s in info["skills"]} >= {"text-reading", "counting", "barcode-reading"}
    assert "stamp-ocr@@text-reading" in info["pairs"] and "zxing@@barcode-reading" in info["pairs"]
    merged = load_config(tmp_path / "mine.yaml")
    assert merged.profile_to_read() == packaged.profile_path() and merged.profile_path() is None


def test_package_paths_and_extends_problems_are_named(tmp_path):
    """`package:` paths resolve inside the installed package; a registry may override a packaged card by name; a
    cycle or a missing base names the files."""
    from maestro_graph.registry.config import default_config_path, load_config

    (tmp_path / "plain.yaml").write_text(textwrap.dedent("""\
        skill_dirs: ["package:skills"]
        profile: package:default_registry.profile.json
        models:
          - {name: zxing, description: zxing-cpp., capabilities: [barcode],
             backend: {type: python, entry: "maestro_graph.experts.zxing_barcode:ZXingBarcodeExpert"}}
        """))
    plain = Registry.load(tmp_path / "plain.yaml")
    assert "barcode-reading" in plain.skills and plain.pair_ids() == ["zxing@@barcode-reading"]
    assert plain.config.profile_path() == default_config_path().parent / "default_registry.profile.json"

    (tmp_path / "cheaper.yaml").write_text("extends: plain.yaml\nmodels:\n  - {name: zxing, description: Cheaper., "
                                           "capabilities: [barcode], cost: {per_call: 0.01}, backend: {type: python, "
                                           "entry: \"maestro_graph.experts.zxing_barcode:ZXingBarcodeExpert\"}}\n")
    cheaper = load_config(tmp_path / "cheaper.yaml")
    assert [(m.name, m.cost.per_call) for m in cheaper.models] == [("zxing", 0.01)]

    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ConfigError, match="makes a cycle"):
        load_config(tmp_path / "a.yaml")
    (tmp_path / "orphan.yaml").write_text("extends: nowhere.yaml\n")
    with pytest.raises(ConfigError, match=r"nowhere.yaml: no such registry config file \(extended by .*orphan.yaml\)"):
        load_config(tmp_path / "orphan.yaml")
