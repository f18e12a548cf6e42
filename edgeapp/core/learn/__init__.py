"""Retraining a classifier head in numpy: embeddings, training, the held-out split and its scores,
the quantized head."""
