"""Images in, results out, pure: preprocessing (Pillow, OpenCV frames), classification, detection
(SSD, YOLO), pose, segmentation, boxes and overlays."""
