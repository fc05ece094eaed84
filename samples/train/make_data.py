#!/usr/bin/python3
"""The synthetic image task the training sample learns (samples/cpp/train_cnn.cpp, docs/training.md).

    samples/train/make_data.py DIR [--count D] [--seed S]

Writes DIR/x.npy [D, 3, 32, 32] and DIR/target.npy [D, 10] (one-hot), float32, the same bytes for the same
count and seed. Class k (0-9) is a sinusoidal grating of period 8 pixels at orientation (k % 5) * 36 degrees,
at a random phase, in colour k // 5 (red-heavy or blue-heavy), under Gaussian noise of deviation 0.5: what a
small CNN's oriented filters, ReLU and global pooling can tell apart, and a linear model of the pixels cannot.
"""
import argparse
import os

import numpy as np


def make(count, seed):
    rng = np.random.default_rng(seed)
    labels = np.arange(count) % 10
    rng.shuffle(labels)
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float64)
    x = np.empty((count, 3, 32, 32), np.float32)
    for i, k in enumerate(labels):
        theta = np.pi * (k % 5) / 5
        grating = np.sin(2 * np.pi * (xx * np.cos(theta) + yy * np.sin(theta)) / 8 + rng.uniform(0, 2 * np.pi))
        tint = (1.0, 0.6, 0.2) if k < 5 else (0.2, 0.6, 1.0)
        image = np.stack([grating * t for t in tint])
        x[i] = image + rng.normal(0, 0.5, image.shape)
    target = np.eye(10, dtype=np.float32)[labels]
    return x, target


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir")
    p.add_argument("--count", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    x, target = make(a.count, a.seed)
    os.makedirs(a.dir, exist_ok=True)
    np.save(os.path.join(a.dir, "x.npy"), x)
    np.save(os.path.join(a.dir, "target.npy"), target)
    print(f"wrote {a.dir}/x.npy {list(x.shape)} and {a.dir}/target.npy {list(target.shape)}")


if __name__ == "__main__":
    main()
