"""Tracking over a camera run's boxes, pure: ByteTrack (Kalman filter, assignment) and the counting
lines and zones users draw."""
