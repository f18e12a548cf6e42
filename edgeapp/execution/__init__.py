"""How inferences are scheduled: one device, several Edge TPUs, segment pipelines, decoding ahead."""
