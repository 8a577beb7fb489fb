#!/usr/bin/env python
"""Profile only some pairs and merge them into a registry's profile (and reach): the pairs whose skill changed, or
the pairs of an expert added to a profiled registry.

`maestro registry profile` measures every pair; when a skill's code changes only its pairs' entries (whose
fingerprints include the skill's code) go stale, and when an expert is added only its pairs are new. A registry file
holding just those pairs is profiled, and its entries and reach are merged here: entries replace or join the base's (a
part pair the base measured as it is now keeps the base's), and the reach (registry.reach.Reach.merged) gets the
part's outcomes in the rows of the calibration items it shares with the base (all of them, or a sample for an expert
too slow to run on every item), and as rows of their own on other items (each pair's estimates then use the items it
was measured on). The registry's pairs that neither file measured are recorded in the reach as measured on no item, so
reading it warns of nothing while its estimates still say nothing while such a pair may be called. A part with
unmeasured pairs (their calls failed while profiling: `maestro registry profile` exited non-zero) is refused; without
`--part` the script only does that, carrying a profile over to a registry with more pairs. The packaged default
registry is the training registry plus the chat model, whose pair is measured on a sample of the calibration items
(seconds per call on a CPU: docs/training.md).

    .venv/bin/maestro registry profile --registry PART.yaml --tasks TRAIN.jsonl ... --out part.profile.json
    .venv/bin/python scripts/merge_profile.py --registry configs/registry-nolm.yaml --part part.profile.json \\
        --profile configs/registry-nolm.profile.json
    .venv/bin/python scripts/merge_profile.py --registry maestro_graph/default_registry.yaml \\
        --profile configs/registry-nolm.profile.json --out maestro_graph/default_registry.profile.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from maestro_graph.registry import Registry
from maestro_graph.registry.profiles import ProfileFile, pair_fingerprints, registry_fingerprint
from maestro_graph.registry.reach import Reach, reach_path


def merge(registry: Registry, base_path: Path, part_path: Path | None) -> tuple[ProfileFile, Reach | None]:
    """The base profile (and its reach, when both have one) with the part's pairs measured again or added, and the
    registry's pairs neither measured recorded as unmeasured in the reach; a part pair the base measured as it is
    now keeps the base's figures."""
    current = pair_fingerprints(registry.pair_cards())
    base = ProfileFile.model_validate(json.loads(base_path.read_text()))
    part = ProfileFile.model_validate(json.loads(part_path.read_text())) if part_path else base.model_copy(
        update={"pairs": []})
    if part.unmeasured:
        raise SystemExit(f"{part_path}: {[u.pair for u in part.unmeasured]} were not measured (their calls failed: "
                         f"{part.unmeasured[0].reason}); profile them again once their endpoints answer")
    fresh = {e.pair: e for e in part.pairs}
    stale = [pair for pair, entry in fresh.items() if current.get(pair) != entry.fingerprint]
    if stale:
        raise SystemExit(f"{part_path}: {stale} were not measured as the registry's pairs are now")
    # a pair the base measured as it is now keeps the base's entry and rows: the part ran it only because its new
    # pairs need it (the OCR model a chat skill reads the image with), and the base measured it on every item
    measured = {e.pair: e.fingerprint for e in base.pairs}
    fresh = {pair: entry for pair, entry in fresh.items() if measured.get(pair) != entry.fingerprint}
    entries = [fresh.get(e.pair, e) for e in base.pairs] + [e for p, e in fresh.items() if p not in measured]
    profile = base.model_copy(update={"pairs": entries, "registry": registry_fingerprint(current)})
    reach = Reach.read(reach_path(base_path), measured)
    if part_path is not None:
        new = Reach.read(reach_path(part_path), {pair: e.fingerprint for pair, e in fresh.items()})
        reach = reach.merged(new) if reach is not None and new is not None else None
    return profile, (reach.with_unmeasured(current) if reach is not None else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--registry", type=Path, required=True, help="the full registry's YAML")
    parser.add_argument("--part", type=Path, help="the profile of the pairs measured again (none: only record the "
                        "registry's unmeasured pairs)")
    parser.add_argument("--profile", type=Path, required=True, help="the full registry's profile, updated in place")
    parser.add_argument("--out", type=Path, help="write the merged profile (and its reach) here instead")
    args = parser.parse_args()
    profile, reach = merge(Registry.load(args.registry, cache=None, profiled=False), args.profile, args.part)
    out = args.out or args.profile
    profile.save(out)
    if reach is not None:
        reach.save(reach_path(out))
    unmeasured = [pair for j, pair in enumerate(reach.pairs) if np.isnan(reach.right[:, j]).all()] if reach else []
    print(f"{out}: {len(profile.pairs)} pairs; reach {'written' if reach is not None else 'none'}"
          + (f"; recorded as never measured: {unmeasured}" if unmeasured else ""))


if __name__ == "__main__":
    main()
