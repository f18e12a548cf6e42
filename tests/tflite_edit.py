"""Copies of a .tflite file edited through the TFLite flatbuffers schema (broken on purpose)."""

from conftest import tflite_schema


def edited_model(tiny_model, tmp_path, name, edit):
    """A copy of the converted model changed through the TFLite flatbuffers schema."""
    import flatbuffers

    schema = tflite_schema()

    m = schema.ModelT.InitFromPackedBuf(tiny_model.read_bytes(), 0)
    edit(m)
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    p = tmp_path / name
    p.write_bytes(b.Output())
    return p
