"""`--track-score median:0.6`: a track is shown and counted only while the median of its recent
scores passes (Frigate's threshold on a track's score history): one confident frame of a leaf
does not make an object, and an int8 model's score flickering below the threshold for a frame
does not unmake one.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass
from typing import Deque, Dict

from edgeapp.errors import UsageError

HISTORY = 10  # scores kept per track (Frigate keeps ten)
STATISTICS = ("median",)


@dataclass(frozen=True)
class TrackScore:
    statistic: str
    threshold: float


def parse_track_score(text: str) -> TrackScore:
    """`median:0.6`."""
    stat, sep, value = text.partition(":")
    try:
        threshold = float(value)
    except ValueError:
        threshold = -1.0
    if not sep or stat.strip() not in STATISTICS or not 0.0 <= threshold <= 1.0:
        raise UsageError(f"--track-score {text!r}: write median:SCORE with SCORE from 0 to 1 "
                         "(e.g. median:0.6)")
    return TrackScore(stat.strip(), threshold)


class ScoreHistory:
    """Each track's recent scores; whether a track passes now."""

    def __init__(self, rule: TrackScore, size: int = HISTORY) -> None:
        self.rule, self.size = rule, size
        self.scores: Dict[int, Deque[float]] = {}

    def add(self, track_id: int, score: float) -> bool:
        """Record this frame's score of the track; whether its median passes."""
        history = self.scores.setdefault(track_id, deque(maxlen=self.size))
        history.append(float(score))
        return statistics.median(history) >= self.rule.threshold

    def passes(self, track_id: int) -> bool:
        history = self.scores.get(track_id)
        return bool(history) and statistics.median(history) >= self.rule.threshold

    def end(self, track_id: int) -> None:
        self.scores.pop(track_id, None)
