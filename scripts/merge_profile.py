#!/usr/bin/env python
"""Re-profile only the pairs whose skill changed: merge the profile (and reach) of a registry holding just those
pairs into a full registry's profile, measured on the same calibration files in the same order.

`maestro registry profile` measures every pair; when a skill's code changes only its pairs' entries (whose
fingerprints include the skill's code) go stale, so those pairs alone are measured again (a registry file with the
same cards and only the changed skills) and their entries and reach columns replace the stale ones. The merged
reach keeps the base's calibration questions: the part's must be the same items (checked), else nothing is written.

    .venv/bin/maestro registry profile --registry PART.yaml --tasks TRAIN.jsonl ... --out part.profile.json
    .venv/bin/python scripts/merge_profile.py --registry configs/registry-nolm.yaml --part part.profile.json \\
        --profile configs/registry-nolm.profile.json
    cp configs/registry-nolm.profile.json maestro_graph/default_registry.profile.json   # as docs/training.md does
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from maestro_graph.registry import Registry
from maestro_graph.registry.profiles import ProfileFile, pair_fingerprints, registry_fingerprint
from maestro_graph.registry.reach import Reach, reach_path


def merge(registry: Registry, base_path: Path, part_path: Path, *,
          allow_changed: int = 0) -> tuple[ProfileFile, Reach | None]:
    """The base profile (and its reach, when it has one) with the part's pairs measured again. `allow_changed`
    calibration items may differ from the base's (a procedural generator that changed since): their reach rows keep
    the base's features, so the part's outcomes on those rows are of the regenerated items (said on stdout)."""
    current = pair_fingerprints(registry.pair_cards())
    base = ProfileFile.model_validate(json.loads(base_path.read_text()))
    part = ProfileFile.model_validate(json.loads(part_path.read_text()))
    fresh = {e.pair: e for e in part.pairs}
    stale = [pair for pair, entry in fresh.items() if current.get(pair) != entry.fingerprint]
    if stale:
        raise SystemExit(f"{part_path}: {stale} were not measured as the registry's pairs are now")
    entries = [fresh.get(e.pair, e) for e in base.pairs] + [e for p, e in fresh.items()
                                                           if p not in {b.pair for b in base.pairs}]
    profile = base.model_copy(update={"pairs": entries, "registry": registry_fingerprint(current)})
    if not reach_path(base_path).is_file():
        return profile, None
    old = Reach.read(reach_path(base_path), {e.pair: e.fingerprint for e in base.pairs})
    new = Reach.read(reach_path(part_path), {e.pair: e.fingerprint for e in part.pairs})
    changed = (int((~np.isclose(old.features, new.features, atol=2e-3)).any(axis=1).sum())
               if old is not None and new is not None and old.features.shape == new.features.shape else None)
    if changed is None or changed > allow_changed:
        raise SystemExit(f"{reach_path(part_path)}: not measured on the calibration items of {reach_path(base_path)}"
                         + (f" ({changed} items differ; --allow-changed {changed} merges anyway)" if changed else ""))
    if changed:
        print(f"{changed} calibration items differ from the base's; their rows keep the base's features")
    pairs = {**old.pairs, **new.pairs}
    columns = [(new, list(new.pairs).index(p)) if p in new.pairs else (old, list(old.pairs).index(p)) for p in pairs]
    right = np.stack([reach.right[:, j] for reach, j in columns], axis=1)
    return profile, replace(old, right=right, pairs=pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--registry", type=Path, required=True, help="the full registry's YAML")
    parser.add_argument("--part", type=Path, required=True, help="the profile of the pairs measured again")
    parser.add_argument("--profile", type=Path, required=True, help="the full registry's profile, updated in place")
    parser.add_argument("--allow-changed", type=int, default=0,
                        help="calibration items that may differ from the base's (default 0: all the same)")
    args = parser.parse_args()
    profile, reach = merge(Registry.load(args.registry, cache=None), args.profile, args.part,
                           allow_changed=args.allow_changed)
    profile.save(args.profile)
    if reach is not None:
        reach.save(reach_path(args.profile))
    print(f"{args.profile}: {len(profile.pairs)} pairs; reach {'updated' if reach is not None else 'none'}")


if __name__ == "__main__":
    main()
