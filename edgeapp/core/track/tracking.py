"""Multi-object tracking by detection, ByteTrack's way (Zhang et al., 2022): every box of a frame
is matched to the tracks of the frames before, by IoU with where a Kalman filter says each
track is now. Boxes above the score threshold are matched first; then the tracks left over try
the low-score boxes (an object half hidden keeps its track instead of losing it for a frame);
then tracks seen only once try what is left, and the sure boxes still left start tracks, but
not a second one on an object already followed in this frame (a detector's per-class NMS gives
an object it is unsure of a box per class). A track missed for up to `lost_frames` frames waits
(for a gap or an occlusion) and takes the next box that matches it.

Why our own and not `supervision`/`trackers`/`boxmot`: those need Python 3.10+ (the Coral Dev
Board has 3.7) and bring PyAV, matplotlib and requests (or torch) onto a Raspberry Pi; boxmot is
AGPL. The assignment itself, the part a library does best, is SciPy's
`linear_sum_assignment` (the `track` extra). scripts/bench_tracking.py scores this tracker
against Roboflow trackers' and supervision's ByteTrack on the same detections with motmetrics.

Pure numpy over (N, 4) [x0, y0, x1, y1] boxes in pixels; the Kalman filter runs over all
tracks at once, so 20 objects cost one batched update, not twenty.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

Assign = Callable[[np.ndarray, float], List[Tuple[int, int]]]
START = 0.55  # the least sure box that starts a track, by default


@dataclass(frozen=True)
class TrackerSettings:
    """`high`: boxes at least this sure are matched first (the task's display threshold);
    `low`: boxes down to this only keep a track alive; `new`: a track starts from a box at
    least this sure (default: high + 0.1 as ByteTrack, and at least 0.55: ByteTrack's own 0.6
    at its 0.5 high); `lost_frames`: frames a missed track waits for its object (30 at 30 FPS:
    one second of occlusion); `match`: score-weighted IoU a box needs with a track's
    prediction in the first round.

    Why 0.55 and 0.1 (scripts/bench_tracking.py, switches found frame by frame): an object back
    from an occlusion is often boxed unsurely (score 0.4) a little off its track's coasted
    prediction (IoU 0.45); weighted by its score that is 0.18, under ByteTrack's 0.2, so the
    track stayed lost and the box started a second track: an ID switch. A weighted 0.1 takes
    it back, and a new track needs a sure box. On 16 held-out scenes: ID switches 41 -> 22
    (Roboflow trackers' ByteTrack: 45), IDF1 0.833 -> 0.840."""

    high: float = 0.25
    low: float = 0.1
    new: Optional[float] = None  # None: high + 0.1, at least START, at most 0.9
    lost_frames: int = 30
    match: float = 0.1

    @property
    def start(self) -> float:
        return min(0.9, max(self.high + 0.1, START)) if self.new is None else self.new


# ---------------------------------------------------------------------------------------------
# Kalman filter over (cx, cy, aspect, height) and their velocities, batched over tracks


_F = np.eye(8)
_F[:4, 4:] = np.eye(4)
_H = np.eye(4, 8)
_POS, _VEL = 1.0 / 20, 1.0 / 160  # ByteTrack's noise weights, relative to the box height
_SAME = 0.7  # IoU over which a box is a second box on a tracked object (per-class NMS)


def to_xyah(boxes: np.ndarray) -> np.ndarray:
    """(N, 4) corners -> (N, 4) centre x, centre y, width / height, height."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    w, h = b[:, 2] - b[:, 0], np.maximum(b[:, 3] - b[:, 1], 1e-6)
    return np.stack([b[:, 0] + w / 2, b[:, 1] + h / 2, w / h, h], axis=1)


def to_corners(xyah: np.ndarray) -> np.ndarray:
    """(N, >=4) centre x, centre y, aspect, height -> (N, 4) corners."""
    cx, cy, a, h = (xyah[:, i] for i in range(4))
    w = a * h
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)


def kalman_start(xyah: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Means (N, 8) and covariances (N, 8, 8) of new tracks at these boxes, standing still."""
    n = len(xyah)
    mean = np.zeros((n, 8))
    mean[:, :4] = xyah
    h = xyah[:, 3]
    std = np.stack([2 * _POS * h, 2 * _POS * h, np.full(n, 1e-2), 2 * _POS * h,
                    10 * _VEL * h, 10 * _VEL * h, np.full(n, 1e-5), 10 * _VEL * h], axis=1)
    cov = np.zeros((n, 8, 8))
    idx = np.arange(8)
    cov[:, idx, idx] = std ** 2
    return mean, cov


def kalman_predict(mean: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One frame ahead for every track at once (constant velocity)."""
    h = mean[:, 3]
    n = len(mean)
    std = np.stack([_POS * h, _POS * h, np.full(n, 1e-2), _POS * h,
                    _VEL * h, _VEL * h, np.full(n, 1e-5), _VEL * h], axis=1)
    q = np.zeros((n, 8, 8))
    idx = np.arange(8)
    q[:, idx, idx] = std ** 2
    return mean @ _F.T, _F @ cov @ _F.T + q


def kalman_update(mean: np.ndarray, cov: np.ndarray,
                  xyah: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Correct each track's prediction with its matched box (rows paired)."""
    h = mean[:, 3]
    n = len(mean)
    std = np.stack([_POS * h, _POS * h, np.full(n, 1e-1), _POS * h], axis=1)
    r = np.zeros((n, 4, 4))
    idx = np.arange(4)
    r[:, idx, idx] = std ** 2
    s = cov[:, :4, :4] + r  # H P H^T + R
    pht = cov[:, :, :4]  # P H^T
    gain = np.linalg.solve(s, np.transpose(pht, (0, 2, 1))).transpose(0, 2, 1)  # P H^T S^-1
    innovation = xyah - mean[:, :4]
    mean = mean + np.einsum("nij,nj->ni", gain, innovation)
    cov = cov - gain @ s @ np.transpose(gain, (0, 2, 1))
    return mean, cov


# ---------------------------------------------------------------------------------------------
# Matching


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a), len(b)) intersection over union of corner boxes."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    if not len(a) or not len(b):
        return np.zeros((len(a), len(b)))
    x0 = np.maximum(a[:, None, 0], b[None, :, 0])
    y0 = np.maximum(a[:, None, 1], b[None, :, 1])
    x1 = np.minimum(a[:, None, 2], b[None, :, 2])
    y1 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def scipy_assign(cost: np.ndarray, limit: float) -> List[Tuple[int, int]]:
    """Rows matched to columns at least total cost, each pair's cost at most `limit`
    (SciPy's Hungarian solver). A pair over the limit costs just over it, as leaving both
    unmatched would (lapjv's cost_limit, ByteTrack's rule): more matches are never bought with
    worse ones."""
    from scipy.optimize import linear_sum_assignment

    if cost.size == 0:
        return []
    padded = np.where(cost > limit, limit + 1e-4, cost)
    rows, cols = linear_sum_assignment(padded)
    return [(int(r), int(c)) for r, c in zip(rows, cols) if cost[r, c] <= limit]


# ---------------------------------------------------------------------------------------------
# Tracks


@dataclass
class Track:
    """One object followed over frames. `track_id` is given when the track is confirmed (seen
    in two frames, or in the first frame of the run), so ids count real objects."""

    key: int  # internal, never shown
    label_votes: dict = field(default_factory=dict)  # class id -> summed score
    track_id: Optional[int] = None
    hits: int = 1
    first_frame: int = 0
    last_frame: int = 0
    lost: bool = False
    first_box: Optional[tuple] = None  # where it was first seen (before it was confirmed)

    @property
    def confirmed(self) -> bool:
        return self.track_id is not None

    @property
    def class_id(self) -> int:
        """The class this track's boxes were most sure of, summed over its frames."""
        return max(self.label_votes.items(), key=lambda kv: (kv[1], -kv[0]))[0]

    def vote(self, class_id: int, score: float) -> None:
        self.label_votes[class_id] = self.label_votes.get(class_id, 0.0) + float(score)


@dataclass
class TrackStep:
    """What one frame did: `ids[i]` is detection i's track id (None: not on a confirmed track),
    `smoothed[i]` its track's box after this frame (the Kalman filter's, steadier than the
    detection: paths are measured on it); tracks that started (were confirmed) and that ended
    (lost too long) in this frame."""

    ids: List[Optional[int]]
    started: List[Track]
    ended: List[Track]
    smoothed: List[Optional[tuple]] = field(default_factory=list)


class ByteTracker:
    """ByteTrack over one stream of frames: `update` once per frame, in order."""

    def __init__(self, settings: TrackerSettings = TrackerSettings(),
                 assign: Assign = scipy_assign) -> None:
        self.settings, self.assign = settings, assign
        self.tracks: List[Track] = []
        self.mean = np.zeros((0, 8))
        self.cov = np.zeros((0, 8, 8))
        self.frame = 0
        self._next_key = 0
        self._next_id = 1

    def boxes(self) -> np.ndarray:
        """Where each live track is now (corners), in `self.tracks` order."""
        return to_corners(self.mean)

    def update(self, boxes: Sequence, scores: Sequence, classes: Sequence) -> TrackStep:
        """Match one frame's detections to the tracks; start and end tracks."""
        self.frame += 1
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        classes = np.asarray(classes).reshape(-1)
        self._predict()
        det_track, left_high = self._associate(boxes, scores)
        self._correct(det_track, boxes)
        drop = self._duplicates(det_track)
        d = sorted(det_track)
        smoothed = dict(zip(d, map(tuple, to_corners(self.mean[[det_track[i] for i in d]])
                                   .tolist())))
        started = self._refresh(det_track, scores, classes)
        owner = {i: self.tracks[t] for i, t in det_track.items()}
        ended = self._age(set(det_track.values()), drop)
        self._spawn(self._fresh(left_high, boxes, scores, sorted(owner)), boxes, scores,
                    classes, owner, started)
        ids = [owner[i].track_id if i in owner else None for i in range(len(scores))]
        return TrackStep(ids, started, ended,
                    [smoothed.get(i, tuple(boxes[i])) if ids[i] is not None else None
                     for i in range(len(scores))])

    def finish(self) -> List[Track]:
        """The stream ended: every confirmed track ends now."""
        ended = [t for t in self.tracks if t.confirmed]
        self.tracks, self.mean, self.cov = [], np.zeros((0, 8)), np.zeros((0, 8, 8))
        return ended

    def _match(self, tracks: List[int], dets: List[int], boxes: np.ndarray, scores: np.ndarray,
               limit: float, det_track: dict, fuse: bool) -> tuple[List[int], List[int]]:
        """Assign `dets` to `tracks` by 1 - IoU (times the score when `fuse`), at most `limit`;
        the tracks and detections left unmatched. Class-blind, as ByteTrack: a class penalty
        cost more ID switches than it saved on scripts/bench_tracking.py's scenes."""
        if not tracks or not dets:
            return list(tracks), list(dets)
        iou = iou_matrix(to_corners(self.mean[tracks]), boxes[dets])
        sim = iou * scores[dets][None, :] if fuse else iou
        pairs = self.assign(1.0 - sim, limit)
        for r, c in pairs:
            det_track[dets[c]] = tracks[r]
        used_t = {r for r, _ in pairs}
        used_d = {c for _, c in pairs}
        return ([tracks[i] for i in range(len(tracks)) if i not in used_t],
                [dets[j] for j in range(len(dets)) if j not in used_d])

    def _predict(self) -> None:
        """Every confirmed track one frame ahead (a lost one keeps its size). A young track,
        seen once, stays as it started (ByteTrack): its speed comes from its later boxes, not
        from the jitter between its first two."""
        c = np.array([t.confirmed for t in self.tracks], dtype=bool)
        if not c.any():
            return
        lost = np.array([t.lost for t in self.tracks], dtype=bool)
        self.mean[lost, 7] = 0.0
        if c.all():
            self.mean, self.cov = kalman_predict(self.mean, self.cov)
        else:
            self.mean[c], self.cov[c] = kalman_predict(self.mean[c], self.cov[c])

    def _associate(self, boxes: np.ndarray, scores: np.ndarray) -> tuple[dict, List[int]]:
        """ByteTrack's three rounds: detection index -> track index, and the sure boxes left."""
        s = self.settings
        det_track: dict = {}
        high = [i for i in range(len(scores)) if scores[i] > s.high]
        low = [i for i in range(len(scores)) if s.low < scores[i] <= s.high]
        confirmed = [t for t in range(len(self.tracks)) if self.tracks[t].confirmed]
        young = [t for t in range(len(self.tracks)) if not self.tracks[t].confirmed]
        # 1: confirmed tracks (seen or lost) with the sure boxes, IoU weighted by score
        left_t, left_high = self._match(confirmed, high, boxes, scores, 1.0 - s.match,
                                        det_track, fuse=True)
        # 2: the tracks seen last frame and still unmatched, with the unsure boxes
        seen = [t for t in left_t if not self.tracks[t].lost]
        self._match(seen, low, boxes, scores, 0.5, det_track, fuse=False)
        # 3: tracks seen once, with the sure boxes left (ByteTrack's 0.7 cost)
        _young_left, left_high = self._match(young, left_high, boxes, scores, 0.7, det_track,
                                             fuse=True)
        return det_track, left_high

    def _correct(self, det_track: dict, boxes: np.ndarray) -> None:
        """The Kalman update of every matched track with its box, at once."""
        if det_track:
            d = sorted(det_track)
            t = [det_track[i] for i in d]
            self.mean[t], self.cov[t] = kalman_update(self.mean[t], self.cov[t],
                                                      to_xyah(boxes[d]))

    def _duplicates(self, det_track: dict) -> set:
        """One object followed twice: a track matched now and a confirmed one left unmatched on
        nearly the same box (IoU > 0.85). The younger goes, so the older id lives on
        (ByteTrack's rule); a box whose track goes is on no track in this frame (its id is not
        reported: the next frame gives it the older id). The indices of the tracks to drop."""
        used = set(det_track.values())
        matched = sorted(used)
        unmatched = [t for t in range(len(self.tracks))
                     if t not in used and self.tracks[t].confirmed]
        if not matched or not unmatched:
            return set()
        now = to_corners(self.mean)
        iou = iou_matrix(now[matched], now[unmatched])
        drop = set()
        for a, b in zip(*np.nonzero(iou > 0.85)):
            p, q = self.tracks[matched[a]], self.tracks[unmatched[b]]
            older_seen = self.frame - p.first_frame > q.last_frame - q.first_frame
            drop.add(unmatched[b] if older_seen else matched[a])
        for i in [i for i, t in det_track.items() if t in drop]:
            del det_track[i]
        return drop

    def _refresh(self, det_track: dict, scores: np.ndarray, classes: np.ndarray) -> List[Track]:
        """Matched tracks: seen this frame; a young one seen twice is confirmed."""
        started = []
        for i, t in det_track.items():
            track = self.tracks[t]
            track.hits += 1
            track.last_frame, track.lost = self.frame, False
            track.vote(int(classes[i]), scores[i])
            if not track.confirmed:
                self._confirm(track)
                started.append(track)
        return started

    def _age(self, matched: set, drop: set) -> List[Track]:
        """Unmatched tracks: a young one is dropped, a confirmed one waits `lost_frames`; the
        duplicates in `drop` go (a confirmed one ends)."""
        keep, ended = [], []
        for t, track in enumerate(self.tracks):
            if t in drop:
                if track.confirmed:
                    ended.append(track)
            elif t in matched:
                keep.append(t)
            elif not track.confirmed:
                continue
            elif self.frame - track.last_frame > self.settings.lost_frames:
                ended.append(track)
            else:
                track.lost = True
                keep.append(t)
        self.tracks = [self.tracks[t] for t in keep]
        self.mean, self.cov = self.mean[keep], self.cov[keep]
        return ended

    def _fresh(self, dets: List[int], boxes: np.ndarray, scores: np.ndarray,
               taken: List[int]) -> List[int]:
        """The sure boxes left that start tracks: at least `start` sure, and not a second box on
        an object followed (or starting) in this frame, IoU > 0.7 with its box. A detector's NMS
        is per class: an object it is unsure of gets one box per class, and a second track on
        it trades ids with the first (ByteTrack starts one; scripts/bench_tracking.py: fewer
        ID switches without)."""
        fresh: List[int] = []
        for i in sorted((i for i in dets if scores[i] >= self.settings.start),
                        key=lambda i: -scores[i]):
            if not taken or iou_matrix(boxes[i], boxes[taken]).max() <= _SAME:
                fresh.append(i)
                taken = taken + [i]
        return sorted(fresh)

    def _spawn(self, dets: List[int], boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray,
               owner: dict, started: List[Track]) -> None:
        """New tracks from the sure boxes no track took (confirmed at once in the first frame)."""
        if not dets:
            return
        mean, cov = kalman_start(to_xyah(boxes[dets]))
        for i in dets:
            track = Track(self._next_key, first_frame=self.frame, last_frame=self.frame,
                          first_box=tuple(boxes[i]))
            self._next_key += 1
            track.vote(int(classes[i]), scores[i])
            if self.frame == 1:
                self._confirm(track)
                started.append(track)
            owner[i] = track
            self.tracks.append(track)
        self.mean = np.concatenate([self.mean, mean])
        self.cov = np.concatenate([self.cov, cov])

    def _confirm(self, track: Track) -> None:
        track.track_id = self._next_id
        self._next_id += 1
