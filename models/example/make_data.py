#!/usr/bin/env python3
"""The example's data: 512 samples of 32 features and a class label in 0..9, a task
the bundled MLP can learn (the label is the argmax of a fixed random projection).
Raw little-endian files, the bytes a generated step's io takes: data/x.bin float32
[512, 32], data/labels.bin int64 [512].  Seeded: a rerun writes the same bytes."""
import os

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20240613)
x = rng.standard_normal((512, 32)).astype(np.float32)
w = rng.standard_normal((32, 10)).astype(np.float32)
labels = np.argmax(x @ w, axis=1).astype(np.int64)
os.makedirs(os.path.join(here, "data"), exist_ok=True)
x.astype("<f4").tofile(os.path.join(here, "data", "x.bin"))
labels.astype("<i8").tofile(os.path.join(here, "data", "labels.bin"))
print("wrote data/x.bin", x.shape, "data/labels.bin", labels.shape, "class counts", np.bincount(labels, minlength=10))
