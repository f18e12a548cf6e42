"""Metrics over labelled data, pure: top-k, confusion, mIoU (numpy) and COCO's own evaluation (mAP,
OKS AP)."""
