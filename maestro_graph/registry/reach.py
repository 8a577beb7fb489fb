"""A registry's reach: which calibration questions each pair of it answered, so that an episode stops where no
pair it has not yet called is likely to answer a question like this one (knowing when nothing fits): before the first
call on a question like those none of its pairs could answer, and after calls that answered nothing once the pairs
that do answer such questions have been tried, instead of trying unrelated pairs until the budget ends.

`maestro registry profile` measures every pair on every calibration item anyway; the reach keeps, per item, the
question's features (as the routers see them: never its answer, source or domain) and which pairs got it right, in
a safetensors file beside the profile. The estimate for a new question and a set of pairs is the similarity-weighted
share of its nearest calibration questions that one of those pairs answered (features.similarity_mean, as the kNN
router scores pairs), and only for a question close to them: the nearest questions of a kind never calibrated are of
other kinds.

A reach holds only for the pairs it measured: a pair the calibration did not run as it is now (an expert added
since, another model version or skill code) may answer what the measured pairs could not, so while such a pair may
still be called the reach says nothing about the question (a warning naming the file and the pair says so when the
registry is loaded; that pair's old outcomes are dropped). Where that pair declines the question or has been called,
the measured pairs decide as before: an expert added after profiling does not switch the reach off for questions it
cannot take. A registry with fewer pairs (a view of it) keeps the reach and counts only its own pairs.

The same outcomes say, per pair, how it did on questions like this one (`pair_accuracy`): the neural policy reads
that in place of the pair's accuracy on its whole skill family, which cannot tell "this model on charts" from "this
model on everything its skill takes". A pair profiled later on other calibration items (an expert added to a
profiled registry, `Reach.merged`) brings its own rows; `right` is NaN where a pair was not measured on an item, and
each estimate uses only the items its pairs were measured on.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save as safetensors_bytes

from ..errors import ConfigError
from ..features.state import QUESTION_DIM, nearest, question_features, similarity_mean, unit_rows

__all__ = ["PAIR_BAND", "REACH_FLOOR", "REACH_FORMAT", "REACH_K", "REACH_SIMILARITY", "Reach", "reach_path"]

REACH_FORMAT = "maestro-reach-2"
"""Kept only whether some pair answered each item; ignored with a warning (profile again)."""
REACH_K = 10
"""Calibration questions an estimate averages over (the kNN router's k)."""
REACH_SIMILARITY = 0.85
"""The mean cosine similarity of those k below which the reach says nothing: a question that is not close to what
was calibrated (a kind of question no calibration item was of) has neighbours of other kinds, whose outcomes mislead.
Chosen as the lowest value that stopped no episode a pair answers when each source of the validation split's training
part was left out (0.80 stopped 32 such episodes: docs/results.md, "Priors in the code")."""
PAIR_BAND = 0.05
"""How much less similar than the nearest calibration question a neighbour may be and still count in a pair's
accuracy on questions like this one (Reach.pair_accuracy)."""
SAME_FEATURES = 2e-3
"""The largest difference of one feature between two rows of one calibration item (float16 storage rounds them)."""
SAME_QUESTION = 0.999
"""The similarity above which a calibration question is this question (features are stored as float16; distinct
real dev items are at most 0.99 alike)."""
REACH_FLOOR = 0.35
"""The default floor below which an episode stops before its next call (MaestroContext.reach_floor; 0: off), for a
registry with a reach (one without is never stopped, nor is one while a pair it never measured may be called).
Chosen as the largest floor that cost the validation split's policies no accuracy (the measurements, and what it
costs and saves on the test half: docs/results.md, "The reach at every turn, on by default"). Training runs whole
episodes (floor 0)."""


def reach_path(profile: str | Path) -> Path:
    """Where a profile's reach lives: `x.profile.json` -> `x.profile.reach.safetensors`."""
    profile = Path(profile)
    return profile.with_name(f"{profile.stem}.reach.safetensors")


@dataclass(frozen=True)
class Reach:
    """What a registry's pairs answered on its calibration items, kept as the routers see the questions, so a new
    question can be compared with them without running any pair."""

    features: np.ndarray
    """(items, QUESTION_DIM) unit rows: each calibration question's features."""
    right: np.ndarray
    """(items, pairs) 1.0 where the pair (in the order of `pairs`) got the item right, 0.0 where it did not, NaN
    where it was not measured on the item (rows a later profile of other pairs added)."""
    pairs: dict[str, str]
    """The measured pairs: fingerprint by pair id (registry.profiles.pair_fingerprint), in the columns' order."""
    k: int = REACH_K

    @classmethod
    def measure(cls, questions: list[str], images: list[list[str]], choices: list, right: np.ndarray,
                pairs: dict[str, str]) -> Reach:
        return cls(unit_rows(question_features(questions, images, choices)), np.asarray(right, np.float32), pairs)

    @property
    def answered(self) -> np.ndarray:
        """(items,) 1.0 where some pair got the item right."""
        return np.nan_to_num(self.right).max(axis=1, initial=0.0)

    def estimate(self, question: str, images: Sequence[str],
                 choices: Sequence[str] | None, pairs: Iterable[str] | None = None,
                 declined: Iterable[str] = ()) -> float | None:
        """How likely one of `pairs` (default: every measured pair) answers this question: the share of the k most
        similar calibration questions that one of them answered, weighted by similarity. A neighbour only `declined`
        pairs answered (pairs whose skill declines this question from its text) is another kind of question than
        this one, though its words are close ("How many rows and columns are in the table?" beside "What is the mean
        of the numbers in the table?"): it is left out. None (unknown) where no calibration item was measured with
        every one of `pairs`, where the k are on average less similar than `REACH_SIMILARITY`, or where no
        neighbour is left."""
        wanted = set(self.pairs) if pairs is None else set(pairs)
        if not wanted <= set(self.pairs):
            return None
        rows = np.flatnonzero(self._measured(wanted))  # the items every one of them was measured on
        if not len(rows):
            return None
        query = question_features([question], [images], [list(choices) if choices else None])[0]
        index, sims = nearest(self.features[rows], query, self.k)
        if sims.mean() < REACH_SIMILARITY:
            return None
        index = rows[index]
        answered = self._answered(index, wanted)
        alike = (answered > 0) | (self._answered(index, set(declined)) == 0)
        return float(similarity_mean(answered[alike], sims[alike])) if alike.any() else None

    def pair_accuracy(self, question: str, images: Sequence[str],
                      choices: Sequence[str] | None, pairs: Iterable[str]) -> dict[str, float]:
        """Each measured pair's share of the calibration questions most like this one that it got right, weighted
        by similarity: among the items it was measured on, the k nearest that are within `PAIR_BAND` of the nearest
        one's similarity (a small calibration of a new expert holds a few items of each kind, and the next kind's
        items must not count as this one's). A calibration question identical to this one is left out, so a policy
        trained on the calibration items never reads its own item's outcome. Pairs never measured are absent."""
        wanted = set(pairs)
        columns = {pair: j for j, pair in enumerate(self.pairs) if pair in wanted}
        if not columns:
            return {}
        query = unit_rows(question_features([question], [images], [list(choices) if choices else None])[0])
        sims = self.features @ query
        other = sims < SAME_QUESTION
        found: dict[str, float] = {}
        for pair, j in columns.items():
            rows = np.flatnonzero(~np.isnan(self.right[:, j]) & other)
            top = rows[np.argsort(-sims[rows])[: self.k]]
            if len(top):
                top = top[sims[top] >= sims[top[0]] - PAIR_BAND]
                found[pair] = float(similarity_mean(self.right[top, j], sims[top]))
        return found

    def _measured(self, pairs: set[str]) -> np.ndarray:
        """(items,) True where every one of `pairs` was measured."""
        columns = [j for j, pair in enumerate(self.pairs) if pair in pairs]
        return ~np.isnan(self.right[:, columns]).any(axis=1)

    def _answered(self, index: np.ndarray, pairs: set[str]) -> np.ndarray:
        """(len(index),) 1.0 where one of `pairs` got the calibration item right."""
        columns = [j for j, pair in enumerate(self.pairs) if pair in pairs]
        # numpy's stubs want every argument of ix_ of one kind; an array beside a list of ints is what it takes
        return np.nan_to_num(self.right[np.ix_(index, columns)]).max(axis=1, initial=0.0)  # type: ignore[arg-type]

    def merged(self, part: Reach) -> Reach:
        """This reach with `part`'s pairs measured again or added. A part item that is one of these calibration
        items (the same question features: `maestro registry profile` of the same items, or of a subset of them,
        such as a slow expert measured on a sample) fills that item's row; other part items are new rows, where the
        pairs only this reach measured were not measured (NaN). Part's pairs count only part's items (an outcome
        measured before part's run is of another version of the pair), so where part measured a subset of the items
        the estimate over every pair reads that subset."""
        if part.k != self.k:
            raise ValueError(f"the reaches average over other numbers of neighbours ({self.k} and {part.k})")
        rows = self._rows_of(part.features)
        added = rows < 0
        rows[added] = len(self.features) + np.arange(int(added.sum()))
        features = np.vstack([self.features, part.features[added]])
        pairs = {**self.pairs, **part.pairs}
        right = np.full((len(features), len(pairs)), np.nan, np.float32)
        for j, pair in enumerate(pairs):
            if pair in part.pairs:
                right[rows, j] = part.right[:, list(part.pairs).index(pair)]
            else:
                right[: len(self.features), j] = self.right[:, list(self.pairs).index(pair)]
        return Reach(features.astype(np.float32), right, pairs, self.k)

    def _rows_of(self, features: np.ndarray) -> np.ndarray:
        """For each row of `features`, the index of a distinct calibration item with the same features (within
        float16 storage's rounding), else -1."""
        rows = np.full(len(features), -1)
        taken: set[int] = set()
        for i, row in enumerate(features):
            same = np.flatnonzero(np.abs(self.features - row).max(axis=1) <= SAME_FEATURES)
            free = [int(j) for j in same if int(j) not in taken]
            if free:
                rows[i] = free[0]
                taken.add(free[0])
        return rows

    def with_unmeasured(self, pairs: dict[str, str]) -> Reach:
        """This reach with `pairs` (fingerprint by id) it never measured recorded as measured on no item (NaN
        columns): a registry that ships a pair it did not profile says so in its file, so reading it warns of
        nothing, while the reach still says nothing while such a pair may be called and ranks it as unmeasured."""
        new = {pair: fp for pair, fp in pairs.items() if pair not in self.pairs}
        right = np.hstack([self.right, np.full((len(self.features), len(new)), np.nan, np.float32)])
        return Reach(self.features, right, {**self.pairs, **new}, self.k)

    def save(self, path: str | Path) -> None:
        """Write the file `read` reads (float16 features: a few hundred kB for a few hundred items). The arrays are
        made C-ordered first: safetensors writes an array's memory as it lies, so a column-ordered one (what
        `np.hstack` of columns can give) would come back with its values scrambled."""
        header = {"format": REACH_FORMAT, "k": self.k, "pairs": self.pairs}
        data = safetensors_bytes({"features": np.ascontiguousarray(self.features, np.float16),
                                  "right": np.ascontiguousarray(self.right, np.float32)},
                                 metadata={"maestro": json.dumps(header)})
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)

    @classmethod
    def read(cls, path: str | Path, current: dict[str, str]) -> Reach | None:
        """The reach at `path` for the pairs of `current` (fingerprint by id): with a warning naming the file and a
        pair where it did not measure one of them as it is now (that pair's outcomes are dropped, and while it may be
        called the reach says nothing); None, with a warning naming the file, if it is of the first format (no
        per-pair outcomes); None without one if there is no file (a profile written before reaches existed: unknown).
        A damaged file is a ConfigError naming it."""
        path = Path(path)
        if not path.is_file():
            return None
        try:
            with safe_open(str(path), framework="numpy") as fh:
                header = json.loads((fh.metadata() or {}).get("maestro", "null"))
                if not isinstance(header, dict) or header.get("format") != REACH_FORMAT:
                    raise ConfigError(f"not a {REACH_FORMAT} file", file=str(path), field="format")
                features, right = fh.get_tensor("features"), fh.get_tensor("right")
        except (SafetensorError, OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"not a reach file ({exc}); run `maestro registry profile` again",
                              file=str(path)) from exc
        pairs, k = header.get("pairs"), header.get("k")
        if not isinstance(pairs, dict) or not isinstance(k, int) or k < 1:
            raise ConfigError("the header needs `pairs` (fingerprint by pair id) and `k` (a positive integer)",
                              file=str(path), field="pairs" if not isinstance(pairs, dict) else "k")
        if (features.ndim != 2 or features.shape[1] != QUESTION_DIM
                or right.shape != (features.shape[0], len(pairs))):
            raise ConfigError(f"features {list(features.shape)} and right {list(right.shape)} do not fit "
                              f"(items x {QUESTION_DIM} and items x {len(pairs)} pairs)", file=str(path),
                              field="features")
        fitting = {pair: fp for pair, fp in pairs.items() if current.get(pair) == fp}
        missing = sorted(set(current) - set(fitting))
        if missing:
            warnings.warn(f"reach {path}: pair {missing[0]} was not measured as it is now ({len(missing)} such); the "
                          "reach says nothing while such a pair may be called; run `maestro registry profile` again",
                          stacklevel=2)
        columns = [j for j, pair in enumerate(pairs) if pair in fitting]
        return cls(features.astype(np.float32), right[:, columns].astype(np.float32), fitting, k)
