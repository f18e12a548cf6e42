#!/usr/bin/env python3
"""Write edgeapp/core/coral_models.json, the registry behind `edgeapp models`, from the index of
google-coral/test_data (../shared/coral-test-data-index.json: path, git object id and, where
known, size and SHA-256 of every model and label file at one commit).

The curation (which models, their names, tasks, input sizes, labels and preprocessing) is the
table below; hashes and sizes come only from the index, so re-running this after pinning a new
commit of the index cannot silently keep stale hashes.

    python scripts/make_coral_registry.py [--index ../shared/coral-test-data-index.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "edgeapp" / "core" / "coral_models.json"

# Coral's classifiers take (pixel - 128) / 128 (its classify example's defaults); EfficientNet-
# EdgeTPU was trained on (pixel - 127) / 128 (pycoral's tests quantize its input so). Detection,
# pose and segmentation models take the raw pixels, as Coral's examples feed them: "raw".
CLASSIFY_NORM = {"mean": 128.0, "std": 128.0}
EFFICIENTNET_NORM = {"mean": 127.0, "std": 128.0}

# name: (task, input [width, height] or None when unknown, file stem, labels, preprocessing, note)
MODELS = {
    "mobilenet_v1_0.25_128": ("classify", [128, 128], "mobilenet_v1_0.25_128_quant",
                              "imagenet_labels.txt", CLASSIFY_NORM, "ImageNet, MobileNet v1 0.25"),
    "mobilenet_v1_0.5_160": ("classify", [160, 160], "mobilenet_v1_0.5_160_quant",
                             "imagenet_labels.txt", CLASSIFY_NORM, "ImageNet, MobileNet v1 0.5"),
    "mobilenet_v1_0.75_192": ("classify", [192, 192], "mobilenet_v1_0.75_192_quant",
                              "imagenet_labels.txt", CLASSIFY_NORM, "ImageNet, MobileNet v1 0.75"),
    "mobilenet_v1": ("classify", [224, 224], "mobilenet_v1_1.0_224_quant",
                     "imagenet_labels.txt", CLASSIFY_NORM, "ImageNet, MobileNet v1 1.0"),
    "mobilenet_v2": ("classify", [224, 224], "mobilenet_v2_1.0_224_quant",
                     "imagenet_labels.txt", CLASSIFY_NORM, "ImageNet, MobileNet v2 1.0"),
    "efficientnet_s": ("classify", [224, 224], "efficientnet-edgetpu-S_quant",
                       "imagenet_labels.txt", EFFICIENTNET_NORM, "ImageNet, EfficientNet-EdgeTPU S"),
    "efficientnet_m": ("classify", [240, 240], "efficientnet-edgetpu-M_quant",
                       "imagenet_labels.txt", EFFICIENTNET_NORM, "ImageNet, EfficientNet-EdgeTPU M"),
    "efficientnet_l": ("classify", [300, 300], "efficientnet-edgetpu-L_quant",
                       "imagenet_labels.txt", EFFICIENTNET_NORM, "ImageNet, EfficientNet-EdgeTPU L"),
    "inception_v1": ("classify", [224, 224], "inception_v1_224_quant",
                     "imagenet_labels.txt", CLASSIFY_NORM, "ImageNet, Inception v1"),
    "inception_v2": ("classify", [224, 224], "inception_v2_224_quant",
                     "imagenet_labels.txt", CLASSIFY_NORM, "ImageNet, Inception v2"),
    "inception_v3": ("classify", [299, 299], "inception_v3_299_quant",
                     "imagenet_labels.txt", CLASSIFY_NORM, "ImageNet, Inception v3"),
    "inception_v4": ("classify", [299, 299], "inception_v4_299_quant",
                     "imagenet_labels.txt", CLASSIFY_NORM, "ImageNet, Inception v4"),
    "inat_bird": ("classify", [224, 224], "mobilenet_v2_1.0_224_inat_bird_quant",
                  "inat_bird_labels.txt", CLASSIFY_NORM, "iNaturalist birds, MobileNet v2"),
    "inat_insect": ("classify", [224, 224], "mobilenet_v2_1.0_224_inat_insect_quant",
                    "inat_insect_labels.txt", CLASSIFY_NORM, "iNaturalist insects, MobileNet v2"),
    "inat_plant": ("classify", [224, 224], "mobilenet_v2_1.0_224_inat_plant_quant",
                   "inat_plant_labels.txt", CLASSIFY_NORM, "iNaturalist plants, MobileNet v2"),
    "ssd_mobilenet_v1_coco": ("detect", [300, 300], "ssd_mobilenet_v1_coco_quant_postprocess",
                              "coco_labels.txt", "raw", "COCO objects, SSD MobileNet v1 (TF1)"),
    "ssd_mobilenet_v2_coco": ("detect", [300, 300], "ssd_mobilenet_v2_coco_quant_postprocess",
                              "coco_labels.txt", "raw", "COCO objects, SSD MobileNet v2 (TF1)"),
    "ssd_mobilenet_v2_face": ("detect", [320, 320], "ssd_mobilenet_v2_face_quant_postprocess",
                              "face_labels.txt", "raw", "faces, SSD MobileNet v2 (TF1)"),
    "efficientdet_lite0": ("detect", [320, 320], "efficientdet_lite0_320_ptq",
                           "coco_labels.txt", "raw", "COCO objects, EfficientDet-Lite0"),
    "efficientdet_lite1": ("detect", [384, 384], "efficientdet_lite1_384_ptq",
                           "coco_labels.txt", "raw", "COCO objects, EfficientDet-Lite1"),
    "efficientdet_lite2": ("detect", [448, 448], "efficientdet_lite2_448_ptq",
                           "coco_labels.txt", "raw", "COCO objects, EfficientDet-Lite2"),
    "efficientdet_lite3": ("detect", [512, 512], "efficientdet_lite3_512_ptq",
                           "coco_labels.txt", "raw", "COCO objects, EfficientDet-Lite3"),
    "efficientdet_lite3x": ("detect", [640, 640], "efficientdet_lite3x_640_ptq",
                            "coco_labels.txt", "raw", "COCO objects, EfficientDet-Lite3x"),
    "movenet_lightning": ("pose", [192, 192], "movenet_single_pose_lightning_ptq", None, "raw",
                          "one person, 17 keypoints, MoveNet Lightning"),
    "movenet_thunder": ("pose", [256, 256], "movenet_single_pose_thunder_ptq", None, "raw",
                        "one person, 17 keypoints, MoveNet Thunder"),
    "posenet_353_481": ("pose", [481, 353], "posenet/posenet_mobilenet_v1_075_353_481_16_quant_decoder",
                        None, "raw", "several people, PoseNet MobileNet v1 (decoder custom op)"),
    "posenet_481_641": ("pose", [641, 481], "posenet/posenet_mobilenet_v1_075_481_641_16_quant_decoder",
                        None, "raw", "several people, PoseNet MobileNet v1 (decoder custom op)"),
    "posenet_721_1281": ("pose", [1281, 721],
                         "posenet/posenet_mobilenet_v1_075_721_1281_16_quant_decoder",
                         None, "raw", "several people, PoseNet MobileNet v1 (decoder custom op)"),
    "deeplabv3_pascal": ("segment", [513, 513], "deeplabv3_mnv2_pascal_quant",
                         "pascal_voc_segmentation_labels.txt", "raw",
                         "PASCAL VOC, DeepLab v3 MobileNet v2"),
    "deeplabv3_dm05_pascal": ("segment", [513, 513], "deeplabv3_mnv2_dm05_pascal_quant",
                              "pascal_voc_segmentation_labels.txt", "raw",
                              "PASCAL VOC, DeepLab v3 MobileNet v2 depth 0.5"),
    "deeplab_slim_cityscapes": ("segment", None, "deeplab_mobilenet_edgetpu_slim_cityscapes_quant",
                                "cityscapes_segmentation_labels.txt", "raw",
                                "Cityscapes, DeepLab EdgeTPU-slim"),
    # Embedding extractors: the ImageNet classifiers cut before their last layer, the bases of
    # `edgeapp retrain` (their feature vector is what a new head learns from); no labels.
    "mobilenet_v1_embedding": ("embed", [224, 224], "mobilenet_v1_1.0_224_quant_embedding_extractor",
                               None, CLASSIFY_NORM, "1024-d image embedding, MobileNet v1 1.0"),
    "efficientnet_s_embedding": ("embed", [224, 224],
                                 "efficientnet-edgetpu-S_quant_embedding_extractor", None,
                                 EFFICIENTNET_NORM, "image embedding, EfficientNet-EdgeTPU S"),
    "efficientnet_m_embedding": ("embed", [240, 240],
                                 "efficientnet-edgetpu-M_quant_embedding_extractor", None,
                                 EFFICIENTNET_NORM, "image embedding, EfficientNet-EdgeTPU M"),
    "efficientnet_l_embedding": ("embed", [300, 300],
                                 "efficientnet-edgetpu-L_quant_embedding_extractor", None,
                                 EFFICIENTNET_NORM, "image embedding, EfficientNet-EdgeTPU L"),
}

# Pipelined models: compiled into N segments for N Edge TPUs (no CPU model).
PIPELINES = {
    "inception_v3": ("classify", [299, 299], "inception_v3_299_quant", "imagenet_labels.txt",
                     CLASSIFY_NORM),
    "inception_v4": ("classify", [299, 299], "inception_v4_299_quant", "imagenet_labels.txt",
                     CLASSIFY_NORM),
    "ssd_mobilenet_v1_coco": ("detect", [300, 300], "ssd_mobilenet_v1_coco_quant_postprocess",
                              "coco_labels.txt", "raw"),
    "ssd_mobilenet_v2_coco": ("detect", [300, 300], "ssd_mobilenet_v2_coco_quant_postprocess",
                              "coco_labels.txt", "raw"),
}


# Custom operators a model needs that no stock TFLite runtime has (`edgeapp models list` says so).
CUSTOM_OPS = {name: ["PosenetDecoderOp"] for name in MODELS if name.startswith("posenet_")}


def build(index: dict) -> dict:
    known = {f["path"]: f for f in index["files"]}
    files: dict = {}

    def use(path: str) -> str:
        if path not in known:
            sys.exit(f"{path} is not in the index")
        f = known[path]
        files[path] = {k: f[k] for k in ("size", "sha256", "git_blob_sha1") if k in f}
        return path

    models = {}
    for name, (task, size, stem, labels, pre, note) in MODELS.items():
        models[name] = {"task": task, "input": size, "description": note,
                        "cpu": use(stem + ".tflite"), "edgetpu": use(stem + "_edgetpu.tflite"),
                        "labels": use(labels) if labels else None, "preprocessing": pre}
        if name in CUSTOM_OPS:
            models[name]["custom_ops"] = CUSTOM_OPS[name]
    for base, (task, size, stem, labels, pre) in PIPELINES.items():
        for n in (2, 3, 4):
            segs = [use(f"pipeline/{stem}_segment_{i}_of_{n}_edgetpu.tflite") for i in range(n)]
            models[f"{base}_pipeline{n}"] = {
                "task": task, "input": size, "segments": segs, "labels": use(labels),
                "preprocessing": pre,
                "description": f"{base} compiled into {n} segments for {n} Edge TPUs (pipelining)"}
    return {"edgeapp_registry": 1, "source": index["source"], "commit": index["commit"],
            "url_template": index["url_template"], "models": models,
            "files": dict(sorted(files.items()))}


def dumps(registry: dict) -> str:
    """Pretty at the top, one line per model and per file: readable, and diffs show what changed."""
    def block(d: dict) -> str:
        return "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in d.items()) + "\n }"
    head = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in registry.items() if not isinstance(v, dict)]
    body = [f" {json.dumps(k)}: {block(v)}" for k, v in registry.items() if isinstance(v, dict)]
    return "{\n" + ",\n".join(head + body) + "\n}\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, default=ROOT.parent / "shared" / "coral-test-data-index.json")
    ap.add_argument("-o", "--output", type=Path, default=OUT)
    args = ap.parse_args()
    registry = build(json.loads(args.index.read_text()))
    args.output.write_text(dumps(registry))
    n_sha = sum("sha256" in f for f in registry["files"].values())
    print(f"{args.output}: {len(registry['models'])} models, {len(registry['files'])} files "
          f"({n_sha} with SHA-256, the others verified by git object id)")


if __name__ == "__main__":
    main()
