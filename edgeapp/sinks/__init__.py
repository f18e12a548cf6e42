"""Where results go: results files (table/JSONL/CSV), the live view, MQTT, plots."""
