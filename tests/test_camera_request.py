"""The camera's settings declared once (flows/camera/request.py): every setting has its flag,
and the command and the API refuse the same things through the one builder, each in its own
words."""

from __future__ import annotations

import os

import pytest
from conftest import ROOT

from edgeapp.errors import UsageError
from edgeapp.flows.camera.request import API_WORDS, CLI_WORDS, CameraSettings, camera_request, flag

DETECTOR = ROOT / "models" / "shapes_yolov8_int8.tflite"


def test_every_setting_is_a_flag_of_the_command_spelled_as_messages_spell_it():
    from dataclasses import fields

    from edgeapp.cli.camera import command

    declared = {p.name: p.opts for p in command().params}
    for f in fields(CameraSettings):
        assert flag(f.name) in declared[f.name], f.name


def test_a_setting_that_needs_track_is_refused_in_each_faces_words(tmp_path):
    for name, value in (("count_lines", ["door:0,0,1,1"]), ("zones", ["z:0,0,1,0,1,1"])):
        with pytest.raises(UsageError, match=f"^{flag(name)} counts tracked objects: add --track$"):
            camera_request(CameraSettings(**{name: value}), CLI_WORDS, model="m.tflite")
        with pytest.raises(UsageError, match=f"^{name} counts tracked objects: add track=True$"):
            camera_request(CameraSettings(**{name: value}), API_WORDS, model="m.tflite")


def test_events_without_track_take_the_engines_events(tmp_path):
    """--events alone: the engine's events (engine_lost, engine_recovered), no tracks'."""
    request = camera_request(CameraSettings(events=tmp_path / "ev.jsonl"), CLI_WORDS, model="m.tflite")
    assert request.tracking is None and request.settings.events == tmp_path / "ev.jsonl"


def test_a_link_to_the_same_file_is_the_same_path(tmp_path):
    target = tmp_path / "records.jsonl"
    target.write_text("")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    settings = CameraSettings(output=target, track=True, events=str(link))
    with pytest.raises(UsageError, match="--output and --events name the same file"):
        camera_request(settings, CLI_WORDS, model="m.tflite")
    with pytest.raises(UsageError, match="output and events name the same file"):
        camera_request(settings, API_WORDS, model="m.tflite")
    camera_request(CameraSettings(output=os.devnull, track=True, events=os.devnull), CLI_WORDS,
                   model="m.tflite")  # /dev/null twice: both thrown away


def test_the_api_refuses_what_the_command_refuses(tmp_path):
    """Before the source is opened (it does not exist here)."""
    from edgeapp import open_model

    video = tmp_path / "none.avi"
    with open_model(DETECTOR) as model:
        with pytest.raises(UsageError, match="zones counts tracked objects: add track=True"):
            model.camera(str(video), zones=["z:0,0,1,0,1,1"])
        with pytest.raises(UsageError, match="the same file"):
            model.camera(str(video), track=True, events=tmp_path / "x", output=tmp_path / "x")
