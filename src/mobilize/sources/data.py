"""Data sources: real samples for calibration, accuracy and benchmark inputs, from one abstraction.

Reference syntax (``--data``): ``digits`` (scikit-learn's labelled 8x8 digits, upscaled to RGB;
``digits:train`` / ``digits:test`` for the fixed 70/30 split), ``sample-photos`` (random crops
of scikit-learn's two photos), a folder of images (one subfolder per label, or unlabelled),
or an ``.npz`` file (``x`` and optional ``y`` arrays).  Every image goes through the same
transform: to RGB in [0, 1], resize (shorter side to 256/224 of the target), center-crop to
the model's input size, ImageNet normalization.

    >>> from mobilize.sources.data import open_data
    >>> from mobilize.core.inputs import InputSpec
    >>> data = open_data("digits:test")
    >>> x, y = next(iter(data.batches(InputSpec((1, 3, 32, 32)), limit=1)))
    >>> tuple(x.shape), int(y[0])
    ((1, 3, 32, 32), 6)
"""

from __future__ import annotations

import abc
import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np

if TYPE_CHECKING:
    import torch

from mobilize.core.errors import ConfigError, UserError, headline, translate_errors
from mobilize.core.inputs import InputSpec, apply_memory_format, out_of_range, shape_text

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"}
DIGITS_SEED = 0
DIGITS_TEST_FRACTION = 0.3


@dataclasses.dataclass(frozen=True)
class Transform:
    """How raw images become model inputs."""

    resize_ratio: float = 256 / 224
    """Shorter side resized to this times the target size before the center crop (1.0: no crop)."""
    normalize: bool = True
    """ImageNet mean/std normalization (else values stay in [0, 1])."""


class DataSource(abc.ABC):
    """Yields (input batch, labels or None) shaped for one model input."""

    name: str
    labelled: bool = False
    num_classes: int | None = None
    inputs_per_sample: int = 1
    """How many model inputs one sample feeds (an .npz may hold one array per input)."""

    def __init__(self, reference: str, transform: Transform = Transform()):
        self.reference = reference
        self.transform = transform

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def _images(self) -> Iterator[tuple[np.ndarray, int | None]]:
        """HWC float32 RGB images in [0, 1] (or ready CHW arrays) with their labels."""

    def batches(self, spec: InputSpec, limit: int | None = None, batch_size: int | None = None
                ) -> Iterator[tuple["torch.Tensor", "torch.Tensor | None"]]:
        """Batches shaped like ``spec`` (its batch dimension unless ``batch_size`` says otherwise)."""

        if len(spec.shape) != 4 and not isinstance(self, NpzSource):
            raise ConfigError(f"data source '{self.reference}' gives images, but the model input is {spec}",
                              hint="image data needs an N,C,H,W input")
        batch = batch_size or spec.shape[0]
        xs, ys = [], []
        count = 0
        for image, label in self._images():
            if limit is not None and count >= limit:
                break
            xs.append(self.to_chw(image, spec))
            ys.append(label)
            count += 1
            if len(xs) == batch:
                yield self._stack(xs, ys, spec)
                xs, ys = [], []
        if xs:
            yield self._stack(xs, ys, spec)
        if count == 0:
            raise UserError(f"data source '{self.reference}' has no samples")

    def _stack(self, xs, ys, spec: InputSpec):
        import torch

        x = torch.from_numpy(np.stack(xs)).to(spec.torch_dtype)
        x = apply_memory_format(x, spec)
        y = torch.tensor(ys) if all(v is not None for v in ys) else None
        return x, y

    def samples(self, spec: InputSpec, limit: int) -> list:
        """The first ``limit`` single inputs (batch of one each)."""
        return [x for x, _ in self.batches(dataclass_replace_batch(spec, 1), limit=limit)]

    def labelled_sample_lists(self, specs, limit: int, names=None) -> tuple[list[list], list[int] | None]:
        """Up to ``limit`` samples, each the list of the model's inputs shaped as it declares them (a batch of
        ``B`` rows holds ``B`` consecutive images; a last, short batch is left out), and their labels, one per
        row."""
        if len(specs) != 1:
            raise ConfigError(f"data source '{self.reference}' feeds one input, but the model takes {len(specs)}",
                              hint="give an .npz with one array per model input (named after the inputs, or x0, x1, ...)")
        rows = specs[0].shape[0] if specs[0].shape else 1
        xs, ys = [], []
        for x, y in self.batches(specs[0], limit=limit * rows):
            if x.shape[0] != rows and xs:
                break
            xs.append([x])
            ys.extend([None] * rows if y is None else [int(v) for v in y.reshape(-1)])
        return xs, (ys if ys and all(y is not None for y in ys) else None)

    def sample_lists(self, specs, limit: int, names=None) -> list[list]:
        """Up to ``limit`` samples, each the list of the model's inputs (batch of one)."""
        return self.labelled_sample_lists(specs, limit, names)[0]

    def to_chw(self, image: np.ndarray, spec: InputSpec) -> np.ndarray:
        _, channels, height, width = spec.shape
        if image.ndim == 3 and image.shape[0] == channels and image.shape[1:] == (height, width):
            return image.astype(np.float32, copy=False)  # already a model input
        img = resize_center_crop(image, height, width, self.transform.resize_ratio)
        if self.transform.normalize:
            img = (img - IMAGENET_MEAN) / IMAGENET_STD
        chw = np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float32)
        if channels == 1:
            chw = chw.mean(axis=0, keepdims=True)
        elif channels != 3:
            raise ConfigError(f"data source '{self.reference}' gives RGB images but the model input has "
                              f"{channels} channels ({spec})")
        return chw


def _differs(sample: tuple[int, ...], shape: tuple[int, ...]) -> str:
    """Which dimension of a stored sample differs from the model input (as a whole, or as one row of it)."""
    def one(want: tuple[int, ...], what: str) -> str:
        if len(want) != len(sample):
            return f"{len(sample)} dimensions where {what} has {len(want)}"
        k = next(i for i, (a, b) in enumerate(zip(sample, want)) if a != b)
        return f"dimension {k} is {sample[k]} where {what} has {want[k]}"
    rows = one(shape[1:], "a row (the input without its batch)") if shape else None
    whole = one(shape, "the input")
    return whole if rows is None or len(shape) == len(sample) else f"{rows}; as a whole input, {whole}"


def dataclass_replace_batch(spec: InputSpec, batch: int) -> InputSpec:
    """``spec`` with a batch of ``batch``; a scalar (0-d) input has no batch and stays as it is."""
    return dataclasses.replace(spec, shape=(batch, *spec.shape[1:])) if spec.shape else spec


def resize_center_crop(image: np.ndarray, height: int, width: int, ratio: float) -> np.ndarray:
    """HWC float [0,1] → resize shorter side to ``ratio`` × target, center-crop to height × width."""
    from PIL import Image

    h, w = image.shape[:2]
    scale = max(height * ratio / h, width * ratio / w)
    new_h, new_w = max(height, round(h * scale)), max(width, round(w * scale))
    pil = Image.fromarray(np.clip(image * 255.0 + 0.5, 0, 255).astype(np.uint8))
    pil = pil.resize((new_w, new_h), Image.BILINEAR)
    top, left = (new_h - height) // 2, (new_w - width) // 2
    arr = np.asarray(pil, dtype=np.float32)[top:top + height, left:left + width] / 255.0
    return arr


def _sklearn_datasets() -> Path | None:
    from mobilize.core.packages import location

    root = location("sklearn")
    return root / "datasets" if root else None


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as ``sklearn.datasets.load_digits`` returns them ((1797, 8, 8) images, labels), read from
    the file it ships: importing ``sklearn.datasets`` (scikit-learn's base, scipy.stats) cost 1.3 s of every
    process that read data; its own loader where the file is not where it keeps it."""
    import gzip

    path = (_sklearn_datasets() or Path("/nonexistent")) / "data" / "digits.csv.gz"
    if not path.is_file():
        from sklearn.datasets import load_digits as sklearns

        digits = sklearns()
        return digits.images, digits.target
    with gzip.open(path, "rt") as fh:
        data = np.loadtxt(fh, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)


def load_sample_images() -> list[np.ndarray]:
    """scikit-learn's two sample photos (uint8 RGB) as ``sklearn.datasets.load_sample_images().images``, read from the
    files it ships, in its (name) order; see :func:`load_digits`."""
    folder = (_sklearn_datasets() or Path("/nonexistent")) / "images"
    paths = sorted(folder.glob("*.jpg")) if folder.is_dir() else []
    if not paths:
        from sklearn.datasets import load_sample_images as sklearns

        return list(sklearns().images)
    from PIL import Image

    images = []
    for path in paths:
        with Image.open(path) as pil:
            images.append(np.asarray(pil))
    return images


class DigitsSource(DataSource):
    """scikit-learn's 1,797 labelled 8x8 digits (0..16 grey levels) as RGB images."""

    name = "digits"
    labelled = True
    num_classes = 10

    def __init__(self, reference: str, split: str = "all", transform: Transform = Transform(resize_ratio=1.0)):
        super().__init__(reference, transform)
        images, target = load_digits()
        order = np.random.default_rng(DIGITS_SEED).permutation(len(target))
        n_test = int(round(len(order) * DIGITS_TEST_FRACTION))
        if split == "train":
            order = order[n_test:]
        elif split == "test":
            order = order[:n_test]
        elif split != "all":
            raise ConfigError(f"unknown digits split '{split}'", hint="use digits, digits:train or digits:test")
        self.images = images[order].astype(np.float32) / 16.0
        self.targets = target[order]

    def __len__(self) -> int:
        return len(self.targets)

    def _images(self):
        for img, label in zip(self.images, self.targets):
            yield np.repeat(img[:, :, None], 3, axis=2), int(label)


class SamplePhotosSource(DataSource):
    """Seeded random crops (40-100% of the shorter side) of scikit-learn's two sample photos."""

    name = "sample-photos"

    def __init__(self, reference: str, count: int = 64, seed: int = 0, transform: Transform = Transform()):
        super().__init__(reference, transform)
        self.photos = [img.astype(np.float32) / 255.0 for img in load_sample_images()]
        self.count, self.seed = count, seed

    def __len__(self) -> int:
        return self.count

    def _images(self):
        rng = np.random.default_rng(self.seed)
        for i in range(self.count):
            photo = self.photos[i % len(self.photos)]
            h, w = photo.shape[:2]
            side = int(min(h, w) * rng.uniform(0.4, 1.0))
            top, left = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
            yield photo[top:top + side, left:left + side], None


class FolderSource(DataSource):
    """Images in a folder; one subfolder per label (sorted names = class indices), or unlabelled."""

    name = "folder"

    def __init__(self, reference: str, transform: Transform = Transform()):
        super().__init__(reference, transform)
        root = Path(reference)
        files = sorted(p for p in root.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
        if not files:
            raise UserError(f"data folder {root} has no images",
                            hint=f"expected files ending in {', '.join(sorted(IMAGE_SUFFIXES))}")
        classes = sorted({p.parent.name for p in files if p.parent != root})
        self.labelled = all(p.parent != root for p in files) and len(classes) > 1
        self.class_names = classes if self.labelled else []
        self.num_classes = len(classes) if self.labelled else None
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def _images(self):
        from PIL import Image

        for path in self.files:
            try:
                with Image.open(path) as im:
                    arr = np.asarray(im.convert("RGB"), dtype=np.float32) / 255.0
            except (OSError, Image.DecompressionBombError) as exc:  # the bomb check is PIL's, not an OSError
                raise UserError(f"cannot read image {path}: {exc}") from exc
            yield arr, (self.class_names.index(path.parent.name) if self.labelled else None)


class NpzSource(DataSource):
    """An ``.npz`` of real samples.  One model input: ``x`` (N,C,H,W model inputs, or N,H,W,C / N,H,W
    images).  Several inputs: one array per input, named after the model's inputs (``input_ids``,
    ``attention_mask``) or positional ``x0``, ``x1``, ...; integer arrays stay integers.  Labels, when
    present, are ``y`` (or ``labels`` / ``targets``)."""

    name = "npz"
    LABEL_KEYS = ("y", "labels", "targets")

    def __init__(self, reference: str, transform: Transform = Transform()):
        super().__init__(reference, transform)
        with open(reference, "rb") as fh:
            magic = fh.read(6)
        if not magic.startswith(b"PK") and not magic.startswith(b"\x93NUMPY"):
            # np.load would take the bytes for a pickle and suggest loading it unsafely: never suggest that
            raise UserError(f"cannot read {reference} as .npz: not a valid .npz file (not a zip archive of arrays)",
                            hint="write it with numpy.savez")
        # zipfile.BadZipFile and friends: the file is not an .npz at all
        with translate_errors(UserError, f"cannot read {reference} as .npz", message=lambda exc: (
                f"cannot read {reference} as .npz: not a valid .npz file ({type(exc).__name__})")):
            try:
                with np.load(reference, allow_pickle=False) as data:
                    arrays = dict(data)
            except ValueError as exc:
                if "pickle" in str(exc).lower():
                    raise UserError(f"{reference} holds Python objects (pickled arrays); mobilize reads only plain "
                                    f"numeric arrays from .npz files") from None
                raise UserError(f"cannot read {reference} as .npz: {headline(exc)}") from None
            except (OSError, EOFError) as exc:
                raise UserError(f"cannot read {reference} as .npz: {exc}") from exc
        label_key = next((k for k in self.LABEL_KEYS if k in arrays), None)
        inputs = {k: v for k, v in arrays.items() if k != label_key}
        positional = sorted((k for k in inputs if k[:1] == "x" and k[1:].isdigit()), key=lambda k: int(k[1:]))
        single = next((k for k in ("x", "inputs", "images", "data") if k in inputs), None)
        if positional:
            self.input_keys = positional
        elif single is not None and len(inputs) == 1:
            self.input_keys = [single]
        elif inputs:
            self.input_keys = list(inputs)
        else:
            raise UserError(f"{reference} has no input array", hint=f"name it 'x' (or one array per model input); "
                                                                   f"it has: {', '.join(arrays) or 'nothing'}")
        for key in [*self.input_keys, *([label_key] if label_key else [])]:
            if arrays[key].ndim == 0:  # np.savez(x=np.float32(1)): one number, no axis of samples
                raise UserError(f"{reference}: array '{key}' is 0-d (the single value {arrays[key].item()!r}); an .npz "
                                f"holds its samples along the first axis",
                                hint=f"store {key} with a first axis of samples, e.g. numpy.savez(..., {key}="
                                     f"values[None]) for one sample")
        counts = {len(inputs[k]) for k in self.input_keys}
        if len(counts) != 1:
            raise UserError(f"{reference}: the input arrays hold different numbers of samples "
                            f"({', '.join(f'{k}: {len(inputs[k])}' for k in self.input_keys)})")
        if not counts.pop():
            raise UserError(f"{reference} holds no samples (its input arrays have length 0)")
        self.arrays = inputs
        self.inputs_per_sample = len(self.input_keys)
        self.x = inputs[self.input_keys[0]]
        self.y = arrays[label_key] if label_key else None
        self.labelled = self.y is not None
        self.num_classes = int(self.y.max()) + 1 if self.labelled else None

    def labelled_sample_lists(self, specs, limit: int, names=None) -> tuple[list[list], list[int] | None]:
        """Samples for models with any number of inputs; ``names`` (the model's input names) reorder the
        arrays when the file names them."""
        if len(specs) == 1 and self.inputs_per_sample == 1 and len(specs[0].shape) == 4 \
                and tuple(np.asarray(self.x[0]).shape) != tuple(specs[0].shape):  # images, or rows of the input
            return super().labelled_sample_lists(specs, limit)
        import torch

        if len(specs) != self.inputs_per_sample:
            raise ConfigError(f"{self.reference} holds {self.inputs_per_sample} input array(s) "
                              f"({', '.join(self.input_keys)}), but the model takes {len(specs)}")
        keys = list(self.input_keys)
        if names and set(names) <= set(self.arrays):
            keys = list(names)
        rows = [self._rows(key, spec) for key, spec in zip(keys, specs)]
        for key, spec in zip(keys, specs):
            problem = out_of_range(self.arrays[key], spec.dtype)
            if problem:
                raise UserError(f"{self.reference}: array '{key}' feeds a {spec.dtype} input, and {problem}",
                                hint="store values the input's type holds: a cast would change them silently")
        batch = max(max(rows), 1)
        xs = []
        for start in range(0, min(limit * batch, len(self.x)) - batch + 1, batch):
            sample = []
            for key, spec, per in zip(keys, specs, rows):
                arr = np.stack([np.asarray(self.arrays[key][start + k]) for k in range(per)]) if per else \
                    np.asarray(self.arrays[key][start])  # a sample that is the whole input is taken as it is
                sample.append(torch.from_numpy(np.ascontiguousarray(arr)).to(spec.torch_dtype))
            xs.append(sample)
        ys = [int(v) for v in self.y[:len(xs) * batch]] if self.labelled else None
        return xs, ys

    def _rows(self, key: str, spec: InputSpec) -> int:
        """How many of the array's samples make one model input: 0 when each sample is the whole input (a state of
        (2, 1, 128) stored as is), else the input's batch (each sample one row of it)."""
        sample = tuple(np.asarray(self.arrays[key][0]).shape)
        if sample == tuple(spec.shape):
            return 0
        if spec.shape and sample == tuple(spec.shape[1:]):
            return spec.shape[0]
        raise ConfigError(f"{self.reference}: array '{key}' has samples of shape {shape_text(sample)}, but the model "
                          f"input is {spec}: {_differs(sample, tuple(spec.shape))}",
                          hint="store one model input per sample, or one row of it (the input without its batch)")

    def __len__(self) -> int:
        return len(self.x)

    def _images(self):
        for i, item in enumerate(self.x):
            arr = np.asarray(item)
            if arr.dtype == np.uint8:
                arr = arr.astype(np.float32) / 255.0
            if arr.ndim == 2 and min(arr.shape) > 3:
                arr = np.repeat(arr[:, :, None].astype(np.float32), 3, axis=2)
            yield arr.astype(np.float32, copy=False), (int(self.y[i]) if self.labelled else None)

    def to_chw(self, image: np.ndarray, spec: InputSpec) -> np.ndarray:
        if image.shape == tuple(spec.shape[1:]):
            return image  # stored as model inputs: use as they are
        if spec.shape and spec.shape[0] == 1 and image.shape == tuple(spec.shape):
            return image[0]  # stored as whole inputs of a batch of one: one row each
        if image.ndim != 3 or len(spec.shape) != 4:
            raise ConfigError(f"{self.reference}: samples of shape {shape_text(image.shape)} do not match the model "
                              f"input {spec}: {_differs(image.shape, tuple(spec.shape))}",
                              hint="store model inputs (N,C,H,W / N,features) or images (N,H,W[,C]) in 'x'")
        if image.ndim == 3 and image.shape[0] in (1, 3) and image.shape[-1] not in (1, 3):
            image = image.transpose(1, 2, 0)
        return super().to_chw(image, spec)


def open_data(reference: str, *, count: int | None = None) -> DataSource:
    """Resolve a ``--data`` reference."""
    reference = reference.strip()
    head, _, arg = reference.partition(":")
    if head == "digits":
        return DigitsSource(reference, split=arg or "all")
    if head in ("sample-photos", "photos"):
        if arg and not arg.isdigit():
            raise ConfigError(f"bad data source '{reference}': the count after ':' must be a whole number",
                              hint="e.g. sample-photos:16")
        return SamplePhotosSource(reference, count=int(arg) if arg else (count or 64))
    path = Path(reference)
    if path.suffix.lower() == ".npz":
        if not path.is_file():
            raise UserError(f"data file not found: {path}")
        return NpzSource(reference)
    if path.is_dir():
        return FolderSource(reference)
    if path.exists():
        raise ConfigError(f"cannot use {path} as a data source", hint="give a folder of images or an .npz file")
    if os.sep in reference or (os.altsep and os.altsep in reference) or path.suffix or reference.startswith("."):
        raise UserError(f"data not found: {reference} (no such file or folder)",
                        hint="check the path; built-in sources: digits, digits:train, digits:test, sample-photos")
    raise ConfigError(f"unknown data source '{reference}': not a built-in source, and no file or folder by that name",
                      hint="use digits, digits:train, digits:test, sample-photos, a folder of images or an .npz file")
