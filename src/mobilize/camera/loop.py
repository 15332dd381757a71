"""The one frame-to-answer loop: camera frame -> the file's input -> inference -> top-k answer, each stage timed.

``bench --frames`` and ``compare --frames`` run this loop, so a file's frame figure means the same in both.  It
imports no torch for a runtime that needs none (``Session.needs_torch`` False: compare's lean timing workers):
the converter writes a numpy buffer, a torch runtime gets a tensor that shares it, and the answer is read from
the file's float outputs with numpy.

Per frame: **convert** (the one-pass converter writes the model's input, in the layout and dtype the file takes,
into one buffer reused frame after frame), **feed** (the runtime's own ``prepare`` of that buffer: a view when
layout and dtype match, the file's quantize where it takes int8), **infer** (``run_prepared``, what plain
``bench`` times) and **answer** (float outputs, top-k).

    >>> from mobilize.camera.frames import frame_config_for, load_frames, parse_frame_spec
    >>> from mobilize.core.inputs import InputSpec
    >>> from mobilize.runtimes.base import open_session
    >>> from mobilize.sources.models import resolve_model
    >>> session = open_session(resolve_model("zoo:conv_bn_relu"), threads=1)
    >>> cfg = frame_config_for(parse_frame_spec("nv21:64x48"), InputSpec((1, 3, 8, 8)))
    >>> loop = FrameLoop(session, cfg, load_frames(cfg, None)[0])
    >>> times = loop.round(5)
    >>> times.stage_ns.shape, len(times.answer), loop.feed_shares_buffer
    ((5, 4), 5, True)
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from .config import FrameConfig, OutputLayout
from .converter import FrameConverter
from .frames import frame_config_for, load_frames, normalization, parse_frame_spec

STAGES = ("convert", "feed", "infer", "answer")
INFER = STAGES.index("infer")
TOP_K = 5
BUFFER_ALIGN = 64
"""Bytes the converter's buffer is aligned to (a cache line; what torch's allocator gives a tensor): numpy aligns
to 16 only, so without it the file would read its input from another alignment in the loop than benched alone."""


@dataclasses.dataclass(frozen=True)
class FrameTiming:
    """``--frames`` as compare passes it to every timing worker."""

    spec: str
    """``LAYOUT:WIDTHxHEIGHT[:ROTATION]``."""
    resize: str = "nearest"
    source: str | None = None
    """A raw frame file or a folder of them (``--frames-from``); None: the synthetic moving pattern."""

    @property
    def label(self) -> str:
        """The unit's name in a why line: ``frame to answer, nv21 1920x1080``."""
        s = parse_frame_spec(self.spec)
        return f"frame to answer, {s.layout} {s.width}x{s.height}" + (f" rotated {s.rotation}" if s.rotation else "")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class FrameTimes:
    """One round of the loop."""

    times_ns: list[int]
    """Frame to answer, per frame."""
    loop_ns: int
    stage_ns: np.ndarray
    """(frames, 4) int64: each frame's convert, feed, infer and answer."""
    answer: list[tuple[int, float]]
    """The last frame's top-k."""


def top_k(outputs: Any, k: int = TOP_K) -> list[tuple[int, float]]:
    """(class, score) of the k largest entries of the first output; ties go to the lower class, as in the native
    loop (an int8 model's scores tie often).  numpy only: the same work for every runtime."""
    scores = np.asarray(_first(outputs), dtype=np.float32).reshape(-1)
    order = np.argsort(-scores, kind="stable")[:k]
    return [(int(i), float(scores[i])) for i in order]


def _first(raw: Any) -> Any:
    """The first output tensor of whatever a runtime returns (a tensor, an array, a list, tuple or dict of them)."""
    while isinstance(raw, (list, tuple, dict)):
        raw = next(iter(raw.values())) if isinstance(raw, dict) else raw[0]
    if hasattr(raw, "detach"):
        raw = raw.detach().numpy()
    return raw


def aligned_output(conv: FrameConverter) -> np.ndarray:
    """``conv.new_output()`` at a :data:`BUFFER_ALIGN`-byte boundary."""
    proto = conv.new_output()
    raw = np.empty(proto.nbytes + BUFFER_ALIGN, np.uint8)
    start = (-raw.ctypes.data) % BUFFER_ALIGN
    return raw[start:start + proto.nbytes].view(proto.dtype).reshape(proto.shape)


def _pointers(native: Any) -> list[int]:
    """Data addresses of the arrays/tensors a runtime's prepared input holds."""
    if isinstance(native, dict):
        native = list(native.values())
    if isinstance(native, (list, tuple)):
        return [p for item in native for p in _pointers(item)]
    if hasattr(native, "data_ptr"):
        return [native.data_ptr()]
    if isinstance(native, np.ndarray):
        return [native.__array_interface__["data"][0]]
    return []


class FrameLoop:
    """One session's frame loop over ``frames``, converted by ``cfg``; :meth:`round` times it."""

    def __init__(self, session: Any, cfg: FrameConfig, frames: list):
        self.session, self.cfg, self.frames = session, cfg, frames
        self.conv = FrameConverter(cfg)
        self.buffer = aligned_output(self.conv)
        self.inputs = [self.view_of(self.buffer)]
        t0 = time.perf_counter_ns()
        self.conv(frames[0], out=self.buffer)
        native = session.prepare(self.inputs)
        self.first_answer = top_k(session.float_outputs(session.checked_run(native, self.inputs)))
        self.first_run_ms = (time.perf_counter_ns() - t0) / 1e6
        low = self.buffer.__array_interface__["data"][0]
        pointers = _pointers(native)
        self.feed_shares_buffer = bool(pointers) and all(low <= p < low + self.buffer.nbytes for p in pointers)
        """Whether the runtime reads the converter's buffer itself (no copy before the run)."""
        self.done = 0

    def round(self, n: int, warmup: int = 0, warmup_s: float = 0.0) -> FrameTimes:
        """``warmup`` untimed frames (and at least ``warmup_s`` seconds of them), then ``n`` timed ones."""
        clock, count = time.perf_counter_ns, len(self.frames)
        conv, buffer, frames, inputs = self.conv, self.buffer, self.frames, self.inputs
        prepare, run, floats = self.session.prepare, self.session.run_prepared, self.session.float_outputs
        stamps = np.zeros((n, len(STAGES)), np.int64)
        scratch = np.zeros(len(STAGES), np.int64)
        answer: list = []

        def one(i: int, row: np.ndarray) -> list:
            a = clock()
            conv(frames[i % count], out=buffer)
            b = clock()
            prepared = prepare(inputs)
            c = clock()
            raw = run(prepared)
            d = clock()
            got = top_k(floats(raw))
            row[:] = (b - a, c - b, d - c, clock() - d)
            return got

        until = time.monotonic() + warmup_s
        w = 0
        while w < warmup or time.monotonic() < until:
            one(self.done + w, scratch)
            w += 1
        start = clock()
        for i in range(n):
            answer = one(self.done + w + i, stamps[i])
        loop_ns = clock() - start
        self.done += w + n
        return FrameTimes(stamps.sum(axis=1).tolist(), loop_ns, stamps, answer)

    def own_input(self) -> Any:
        """The file's own prepared input, as benched alone: a copy of the converter's buffer (same values, layout and
        alignment of its own), through the runtime's ``prepare``."""
        return self.session.prepare([self.view_of(np.copy(self.buffer, order="K"))])

    def view_of(self, array: np.ndarray) -> Any:
        """The model's input over ``array`` (the converter's output, shared, never copied): a torch tensor for a
        runtime that needs torch, and for an NHWC buffer the model's logical NCHW as a permuted view."""
        view: Any = array
        if type(self.session).needs_torch:
            import torch

            view = torch.from_numpy(array)
        if self.cfg.output_layout is OutputLayout.NHWC:
            view = view.permute(0, 3, 1, 2) if hasattr(view, "permute") else view.transpose(0, 3, 1, 2)
        return view

    def alone_round(self, n: int, prepared: Any) -> list[int]:
        """The file alone: ``run_prepared(prepared)`` back to back, ``n`` times (what plain ``bench`` times)."""
        clock, run = time.perf_counter_ns, self.session.run_prepared
        out = []
        for _ in range(n):
            a = clock()
            run(prepared)
            out.append(clock() - a)
        return out

    def gap_round(self, n: int, prepared: Any) -> list[int]:
        """The control for the infer stage: ``run_prepared(prepared)`` (the file alone, on its own prepared input)
        timed ``n`` times with a frame's convert between runs, into the converter's buffer, which that run does not
        read.  The file alone sees no pause; the loop sees the convert, feed and answer between runs: if this control
        is as slow as the loop's infer stage, the pause is what slows the file (its runtime's threads idle, its
        caches are refilled), not the input the frame path hands it."""
        clock, count, run, conv = time.perf_counter_ns, len(self.frames), self.session.run_prepared, self.conv
        out = []
        for i in range(n):
            conv(self.frames[(self.done + i) % count], out=self.buffer)
            a = clock()
            run(prepared)
            out.append(clock() - a)
        return out


def frame_loop_for(session: Any, inputs: list, timing: FrameTiming) -> FrameLoop:
    """The frame loop that makes ``inputs[0]`` (the reference's sample: its shape and element type) from camera
    frames, in the layout the file takes it (NHWC where its interface says so, or the sample is channels-last),
    normalised as the file's manifest says (else ImageNet's mean and std)."""
    from mobilize.core.errors import ConfigError
    from mobilize.core.inputs import InputSpec, MemoryFormat, input_type_name

    if len(inputs) != 1:
        raise ConfigError(f"--frames feeds one image input; the model takes {len(inputs)}")
    x = inputs[0]
    faces = session.interface().inputs
    nhwc = (bool(faces) and faces[0].layout == "NHWC") or _channels_last(x)
    spec = InputSpec(tuple(x.shape), input_type_name(str(x.dtype)),
                     MemoryFormat.CHANNELS_LAST if nhwc else MemoryFormat.CONTIGUOUS)
    mean, std, _ = normalization(session.target)
    cfg = frame_config_for(parse_frame_spec(timing.spec), spec, timing.resize, mean, std)
    key = (cfg.width, cfg.height, cfg.layout, cfg.stride, cfg.chroma_stride, timing.source)
    if key not in _FRAMES:  # read once per process: a timing host's variants share one copy
        _FRAMES[key] = load_frames(cfg, timing.source)[0]
    return FrameLoop(session, cfg, _FRAMES[key])


_FRAMES: dict[tuple, list] = {}


def write_frames(timing: FrameTiming, path: str) -> FrameTiming:
    """The frames of ``timing`` (without a source: the synthetic pattern, seconds to draw at 1080p) written once to
    ``path`` as raw frames back to back; returns the timing that reads them from there, for the workers."""
    from .config import FrameConfig

    if timing.source:
        return timing
    s = parse_frame_spec(timing.spec)
    cfg = FrameConfig(width=s.width, height=s.height, layout=s.layout, rotation=s.rotation, output_size=(1, 1))
    frames, _ = load_frames(cfg, None)
    np.concatenate(frames).tofile(path)
    return dataclasses.replace(timing, source=path)


def _channels_last(x: Any) -> bool:
    """A 4-d torch tensor laid out NHWC (a numpy sample is C-contiguous: NCHW)."""
    if not hasattr(x, "is_contiguous") or len(x.shape) != 4:
        return False
    import torch

    return x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
