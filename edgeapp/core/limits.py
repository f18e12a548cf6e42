"""Limits edgeapp enforces on user input, each in one place (the CLI and the library share them)."""

MAX_THREADS = 64  # more interpreter threads than this is a typo, and a crash in some runtimes

# Labelled data (eval, convert --eval): what a reader accepts before it measures anything.
MAX_CLASSES = 2000  # class names or categories: LVIS has 1,203; COCO's evaluator allocates per class
MAX_NESTING = 64  # JSON/YAML depth: a COCO file or data.yaml is a few levels deep
MAX_YAML_BYTES = 1024 * 1024  # a data.yaml is a few kB; parsing costs about 1 s a MB, its nodes ~100x
MAX_TEXT_BYTES = 64 * 1024 * 1024  # a label file, classes.txt or val list
MAX_JSON_BYTES = 2 * 1024 * 1024 * 1024  # COCO's train2017 instances JSON is 450 MB
