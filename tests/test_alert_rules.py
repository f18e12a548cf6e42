"""Alert rules as users write them, and their evaluation frame by frame (inertia, dwell, counts,
appearances, lines), on sightings and through the real tracking stage; box filters and the
track score median. Bad rules end in one line with exit 2."""

from __future__ import annotations

import pytest
from cli_run import edgeapp, error_lines
from conftest import ROOT
from media import make_video

from edgeapp.core.track.alerts import Alerts, Sighting
from edgeapp.core.track.rules import check_rules, parse_alert, parse_rules
from edgeapp.core.track.score import ScoreHistory, parse_track_score
from edgeapp.core.track.zones import parse_line, parse_zone
from edgeapp.core.vision.box_filters import BoxFilters, filter_boxes
from edgeapp.errors import UsageError

DETECTOR = ROOT / "models" / "shapes_yolov8_int8.tflite"
FPS = 30.0


# ---------------------------------------------------------------------------------------------
# Parsing


def test_each_kind_parses_with_its_keys():
    r = parse_alert("door:line=front,direction=in,label=person,source=cam1")
    assert (r.kind, r.target, r.direction, r.label, r.source) == ("line", "front", "in", "person", "cam1")
    z = parse_alert("porch: zone=porch, dwell=5, inertia=4")
    assert (z.kind, z.target, z.dwell, z.inertia) == ("zone", "porch", 5.0, 4)
    c = parse_alert("crowd:count=porch,over=2,for=3")
    assert (c.kind, c.over, c.hold, c.inertia) == ("count", 2, 3.0, 3)
    a = parse_alert("new:appear,label=cat")
    assert (a.kind, a.target, a.label) == ("appear", None, "cat")


def test_a_rules_file_takes_a_list_or_a_table():
    listed = parse_rules({"alerts": [{"name": "door", "line": "front", "direction": "in"},
                                     {"name": "new", "appear": True}]}, "f")
    table = parse_rules({"alerts": {"porch": {"zone": "porch", "dwell": 2.5}}}, "f")
    assert [r.name for r in listed] == ["door", "new"] and table[0].dwell == 2.5


@pytest.mark.parametrize("text, words", [
    ("door", "NAME:line"), ("door:", "after the colon"), ("door:fly=x", "not a kind"),
    ("door:line=front,direction=up", "in or out"), ("crowd:count=z", "over=N"),
    ("z:zone=z,dwell=-1", "dwell must be"), ("z:zone=z,inertia=0", "inertia must be"),
    ("z:zone=z,over=2", "not over"), ("z:zone=z,dwell=1,dwell=2", "twice"),
    ("n:appear=yes please", "takes no value"), ("bad name!:appear", "NAME"),
    ("c:count=z,over=1.5", "whole number"), ("z:zone=", "name the zone"),
])
def test_malformed_alerts_name_the_flag(text, words):
    with pytest.raises(UsageError, match="--alert") as e:
        parse_alert(text)
    assert words in str(e.value)


def test_rules_must_name_the_runs_lines_and_zones_once():
    with pytest.raises(UsageError, match="not a --zone of this run"):
        check_rules([parse_alert("a:zone=porch")], ["door"], ["yard"])
    with pytest.raises(UsageError, match="used twice"):
        check_rules([parse_alert("a:appear"), parse_alert("a:appear")], [], [])
    with pytest.raises(UsageError, match="exactly one of"):
        parse_rules({"alerts": [{"name": "x", "zone": "z", "line": "l"}]}, "f")


# ---------------------------------------------------------------------------------------------
# Evaluation on sightings (each frame: which tracks, in which zones)


def _run(rule_texts, frames, source="cam"):
    """frames: one list of (track, label, zones) per frame at 30 FPS; the alerts as
    (frame, rule, track)."""
    alerts = Alerts([parse_alert(t) for t in rule_texts], source)
    fired = []
    for f, seen in enumerate(frames):
        crossings = [c for c in seen if len(c) == 4]
        sightings = [Sighting(s[0], s[1], frozenset(s[2])) for s in seen if len(s) == 3]
        events = [{"track_id": c[0], "label": c[1], "line": c[2], "direction": c[3]} for c in crossings]
        fired += [(a["frame"], a["rule"], a["track_id"]) for a in alerts.update(f, f / FPS, sightings, events)]
    return fired


def _inside(frames_in, total, track=1, label="person", zone="porch"):
    return [[(track, label, {zone} if f in frames_in else set())] for f in range(total)]


def test_flicker_shorter_than_the_inertia_fires_nothing():
    # inside for 2 frames at a time (twice), with the default inertia of 3
    frames = _inside({5, 6, 10, 11}, 30)
    assert _run(["z:zone=porch"], frames) == []
    # with inertia 2 each run enters at its second frame (3 frames out between them leave)
    assert _run(["z:zone=porch,inertia=2"], frames) == [(6, "z", 1), (11, "z", 1)]


def test_zone_enters_after_inertia_and_fires_once_per_visit():
    frames = _inside(set(range(5, 15)) | set(range(25, 40)), 45)
    assert _run(["z:zone=porch"], frames) == [(7, "z", 1), (27, "z", 1)]
    # a one-frame gap out of the zone is no visit of its own
    frames = _inside(set(range(5, 40)) - {20}, 45)
    assert _run(["z:zone=porch"], frames) == [(7, "z", 1)]


def test_dwell_counts_from_the_first_frame_inside():
    frames = _inside(set(range(10, 200)), 200)
    assert _run(["z:zone=porch,dwell=2"], frames) == [(70, "z", 1)]  # 10 + 2 s x 30 FPS
    # leaving before the dwell fires nothing
    assert _run(["z:zone=porch,dwell=2"], _inside(set(range(10, 60)), 100)) == []


def test_a_frame_the_track_is_not_seen_changes_nothing():
    frames = [[(1, "person", {"porch"})] if f < 20 or f >= 25 else [] for f in range(80)]
    assert _run(["z:zone=porch,dwell=2"], frames) == [(60, "z", 1)]


def test_count_over_for_fires_once_per_episode():
    def frame(f):
        seen = [(1, "person", {"porch"})]
        seen.append((2, "person", {"porch"} if 10 <= f < 60 or 100 <= f < 150 else set()))
        return seen
    frames = [frame(f) for f in range(160)]
    # two inside from frame 12 (inertia 3); for 1 s: frame 42; again from 102 -> 132
    assert _run(["c:count=porch,over=1,for=1"], frames) == [(42, "c", None), (132, "c", None)]
    assert _run(["c:count=porch,over=2"], frames) == []


def test_appear_needs_inertia_frames_in_a_row_and_labels_filter():
    frames = [[(1, "cat", set())] if f in (2, 3, 6, 7, 8, 9) else [] for f in range(12)]
    frames[8].append((2, "dog", set()))
    frames[9].append((2, "dog", set()))
    frames[10].append((2, "dog", set()))
    assert _run(["a:appear,label=cat"], frames) == [(8, "a", 1)]
    assert _run(["a:appear"], frames) == [(8, "a", 1), (10, "a", 2)]


def test_line_rules_take_direction_label_and_source():
    frames = [[], [(1, "person", "door", "in")], [(2, "cat", "door", "out")], [(3, "person", "gate", "in")]]
    assert _run(["l:line=door"], frames) == [(1, "l", 1), (2, "l", 2)]
    assert _run(["l:line=door,direction=out"], frames) == [(2, "l", 2)]
    assert _run(["l:line=door,label=person"], frames) == [(1, "l", 1)]
    assert _run(["l:line=door,source=other"], frames) == []
    assert _run(["l:line=door,source=cam"], frames) == [(1, "l", 1), (2, "l", 2)]


# ---------------------------------------------------------------------------------------------
# Through the real tracking stage (ByteTrack on boxes)


def _stage(rules, zones=(), lines=(), track_score=None):
    pytest.importorskip("scipy")
    from edgeapp.flows.camera.tracking import TrackingSettings, TrackStage

    settings = TrackingSettings(lines=[parse_line(x) for x in lines], zones=[parse_zone(z) for z in zones],
                                rules=[parse_alert(r) for r in rules], track_score=track_score)
    return TrackStage(settings, 0.5, "objects", labels=lambda i: ["circle", "square"][int(i)], source="cam")


def _box(cx, cy, s=40.0):
    return [cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2]


def test_the_stage_fires_zone_alerts_after_inertia_on_tracked_boxes():
    """A square walks right at 4 px/frame; the zone is x >= 200. Its centre enters at frame
    50 (x = 200 + 4 px margin of the zone's edge is not needed: the polygon's inside)."""
    stage = _stage(["z:zone=right,dwell=0.5"], zones=["right:200,0,320,0,320,240,200,240"])
    fired = []
    for f in range(90):
        fields = {"objects": [{"id": 1, "label": "square", "score": 0.9, "bbox": _box(2 + 4 * f, 120)}]}
        events = stage.update(fields, f, 1000.0 + f, 320, 240, f * 1000 / FPS)
        fired += [e for e in events if e["event"] == "alert"]
    first_inside = next(f for f in range(90) if 2 + 4 * f > 200)
    assert [(a["frame"], a["rule"]) for a in fired] == [(first_inside + 15, "z")]  # 0.5 s at 30 FPS
    assert fired[0]["media_time"] == pytest.approx((first_inside + 15) / FPS, abs=1e-6)
    assert fired[0]["timestamp"] == 1000.0 + first_inside + 15  # the wall clock, as other events


def test_the_stage_with_a_track_score_median_hides_a_weak_track():
    stage = _stage(["a:appear"], track_score=parse_track_score("median:0.6"))
    fired, shown = [], []
    for f in range(20):
        strong = {"id": 0, "label": "circle", "score": 0.9, "bbox": _box(60 + 2 * f, 60)}
        weak = {"id": 1, "label": "square", "score": 0.55 if f % 4 else 0.9, "bbox": _box(250, 180)}
        fields = {"objects": [strong, weak]}
        fired += [e for e in stage.update(fields, f, float(f), 320, 240) if e["event"] == "alert"]
        shown.append(sorted(o["label"] for o in fields["objects"]))
        assert set(fields["filtered"]) == {"track_score"}
    assert [a["label"] for a in fired] == ["circle"]
    assert all(s == ["circle"] for s in shown[3:])


# ---------------------------------------------------------------------------------------------
# Filters


def test_box_filters_count_what_each_removed():
    boxes = [{"bbox": [0, 0, 10, 10]}, {"bbox": [0, 0, 200, 200]}, {"bbox": [0, 0, 10, 60]},
             {"bbox": [0, 0, 80, 40]}, {"bbox": [0, 0, 40, 40]}]
    kept, removed = filter_boxes(boxes, 320, 240, BoxFilters(min_area=200, max_area=0.25,
                                                             min_ratio=0.5, max_ratio=1.5))
    assert kept == [boxes[4]]
    assert removed == {"min_area": 1, "max_area": 1, "min_ratio": 1, "max_ratio": 1}
    with pytest.raises(UsageError, match="no box could pass"):
        BoxFilters(min_ratio=2, max_ratio=1).check()


def test_track_score_median():
    history = ScoreHistory(parse_track_score("median:0.6"))
    assert [history.add(1, s) for s in (0.9, 0.2, 0.2, 0.9, 0.9)] == [True, False, False, False, True]
    for bad in ("mean:0.5", "median:2", "median", "median:x"):
        with pytest.raises(UsageError, match="--track-score"):
            parse_track_score(bad)


# ---------------------------------------------------------------------------------------------
# The command refuses bad rules in one line


@pytest.mark.parametrize("args, words", [
    (("--alert", "door:line=nowhere"), "not a --count-line"),
    (("--alert", "x:fly"), "not a kind"),
    (("--alert", "z:zone=right,dwell=soon"), "dwell"),
    (("--rules", "RULES_YAML"), "exactly one of"),
    (("--rules", "RULES_BAD"), "not valid YAML"),
    (("--rules", "RULES_TXT"), "YAML (.yaml, .yml) or TOML"),
])
def test_bad_rules_exit_2_in_one_line(tmp_path, args, words):
    pytest.importorskip("yaml")
    video = make_video(tmp_path / "v.avi", ["red", "red"])
    files = {"RULES_YAML": ("r.yaml", "alerts:\n  - name: x\n    zone: right\n    appear: true\n"),
             "RULES_BAD": ("b.yml", "alerts: [\n"), "RULES_TXT": ("r.txt", "")}
    args = list(args)
    if args[-1] in files:
        name, text = files[args[-1]]
        (tmp_path / name).write_text(text)
        args[-1] = tmp_path / name
    r = edgeapp("camera", DETECTOR, "--source", video, "--no-display", "--track",
                "--count-line", "door:0.5,0,0.5,1", "--zone", "right:0.5,0,1,0,1,1,0.5,1", *args)
    assert r.returncode == 2, r.stderr
    assert len(error_lines(r.stderr)) == 1 and words in r.stderr and "Traceback" not in r.stderr


def test_alerts_need_track_and_a_toml_file_is_read(tmp_path):
    video = make_video(tmp_path / "v.avi", ["red", "red"])
    r = edgeapp("camera", DETECTOR, "--source", video, "--no-display", "--alert", "a:appear")
    assert r.returncode == 2 and "add --track" in r.stderr
    rules = tmp_path / "rules.toml"
    rules.write_text('[alerts.door]\nline = "door"\ndirection = "sideways"\n')
    r = edgeapp("camera", DETECTOR, "--source", video, "--no-display", "--track",
                "--count-line", "door:0.5,0,0.5,1", "--rules", rules)
    assert r.returncode == 2 and "direction is in or out" in r.stderr, r.stderr
