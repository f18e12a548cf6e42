"""A camera run, for `edgeapp camera` and the API's `Model.camera`.

  run.py         the whole run: the model opened on its devices, the source, the sinks (records,
                 window, recording, live view, MQTT), tracking, and the outcome (stats, exit code)
  loop.py        the frame loop: frames in, the runner's results to the sinks, statistics kept;
                 several sources share one runner, taken in turn
  sources.py     several sources: their names, lines and zones scoped to one, record files
  tracking.py    --track: track ids, counting lines and zones, events and counts
  tpu_health.py  the Edge TPU's heat, clock and throttling for the live view and MQTT
"""
