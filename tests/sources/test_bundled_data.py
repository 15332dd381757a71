"""The digits and the two sample photos are read from the files scikit-learn ships, without importing
``sklearn.datasets`` (1.3 s a process): the arrays must be what its own loaders return."""

import subprocess
import sys

import numpy as np


def test_the_digits_and_photos_are_scikit_learns_own_arrays():
    from sklearn import datasets

    from mobilize.sources.data import load_digits, load_sample_images

    images, target = load_digits()
    theirs = datasets.load_digits()
    assert images.shape == (1797, 8, 8) and np.array_equal(images, theirs.images)
    assert np.array_equal(target, theirs.target) and target.dtype.kind == "i"
    photos = load_sample_images()
    assert len(photos) == 2 and all(np.array_equal(a, b) and a.dtype == b.dtype
                                    for a, b in zip(photos, datasets.load_sample_images().images))


def test_reading_them_imports_no_scikit_learn():
    script = ("import sys\nfrom mobilize.sources.data import open_data\n"
              "open_data('digits:test'); open_data('sample-photos')\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy')))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
