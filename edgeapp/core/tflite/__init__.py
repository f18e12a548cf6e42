"""The TFLite flatbuffer format: schema enums and option fields (schema.py), reader (model.py),
writer."""
