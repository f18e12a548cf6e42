"""Tasks that run inside other commands only (`retrain` extracts embeddings with `embed`): the
registry finds them here; they have no command, camera mode or MQTT events of their own."""
