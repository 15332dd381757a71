"""``mobilize optimize ... --emit-app DIR``: a minimal CMake project per artifact, ready to build.

Each project is ``main.cpp`` (load the file, feed the bundled input or a raw float32 file, print
the top-5 outputs and the latency), the shared headers, ``model_info.h`` (the artifact's path
and input shape), ``input.raw`` (one real sample from ``--data``, else a seeded random tensor)
and a ``CMakeLists.txt`` that finds LibTorch or ExecuTorch in the installed wheels — the same
template the native benchmark is built from — with the Android NDK / iOS settings in its header.
An ExecuTorch artifact with a bundled program beside it (``.bpte``) gets an app that runs the
bundled input and checks it against the bundled expected output.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from mobilize.core.artifact import Artifact, Format
from mobilize.core.backend import default_runtime
from mobilize.core.errors import BackendUnavailableError
from mobilize.core.inputs import InputSpec, make_random_inputs
from mobilize.core.native_runner import NativeRunner

FRAME_SPEC = "nv21:640x480"
"""The camera frame an app of a runner with ``frames`` (ExecuTorch's) is emitted with (``frame.nv21``, run by
``app --frame``)."""
PROJECT = "app"


def cmake_command(folder: Path) -> str:
    """The shell command that builds the app in ``folder``, each path quoted for the shell (spaces, quotes).

        >>> print(cmake_command(Path("my apps/app")))
        cmake -S 'my apps/app' -B 'my apps/app/build' && cmake --build 'my apps/app/build'
    """
    import shlex

    src, build = shlex.quote(str(folder)), shlex.quote(str(folder / "build"))
    return f"cmake -S {src} -B {build} && cmake --build {build}"


@dataclasses.dataclass(frozen=True)
class EmittedApp:
    folder: Path
    artifact: Path
    """The file the app loads by default (a .bpte beside a .pte when there is one)."""
    format: str
    input_source: str
    """Where ``input.raw`` came from: ``data:digits`` or ``random-with-seed:0``."""

    @property
    def build_command(self) -> str:
        return cmake_command(self.folder)

    def describe(self) -> str:
        """One line for the terminal, with the folder relative to the working directory when inside it."""
        folder = Path(os.path.relpath(self.folder)) if self.folder.is_relative_to(Path.cwd()) else self.folder
        return f"app {folder}  ({self.format}, input {self.input_source}): {cmake_command(folder)}"

    @property
    def binary(self) -> Path:
        return self.folder / "build" / PROJECT

    def to_json(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "artifact": str(self.artifact), "format": self.format,
                "input_source": self.input_source, "build": self.build_command, "run": str(self.binary)}


def emit_apps(artifacts: Sequence[dict[str, Any]], out_dir: str | Path, *, data: str | None = None, seed: int = 0,
              input_specs: Sequence[InputSpec] | None = None) -> tuple[list[EmittedApp], list[str]]:
    """An app project for every artifact a native runtime can load; returns the apps and notes
    for the artifacts left out (other formats, several inputs, a wheel without C++ files)."""
    from mobilize.native.build import runner_for_format

    apps: list[EmittedApp] = []
    notes: list[str] = []
    for entry in artifacts:
        path, fmt = Path(entry["artifact"]), Format(entry["format"])
        if runner_for_format(fmt) is None:
            notes.append(f"emit-app: no native app for {path.name} ({fmt}); apps are made for .pt, .ptl and .pte files")
            continue
        specs = list(input_specs or Artifact.from_file(path).input_specs)
        if len(specs) != 1 or any(d <= 0 for d in specs[0].shape) or specs[0].dtype != "float":
            notes.append(f"emit-app: {path.name} takes {len(specs)} input(s): "
                         f"{'; '.join(str(s) for s in specs) or 'shape unknown'}; the app skeleton feeds one float "
                         f"input of known shape (edit main.cpp of another app, or give --input_dims)")
            continue
        try:
            apps.append(emit_app(path, fmt, Path(out_dir) / f"{path.stem}-{fmt}", specs[0], data=data, seed=seed))
        except BackendUnavailableError as exc:
            notes.append(f"emit-app: no app for {path.name}: {exc}")
    return apps, notes


def emit_app(path: Path, fmt: Format, folder: Path, spec: InputSpec, *, data: str | None = None,
             seed: int = 0) -> EmittedApp:
    """Write one app project for the artifact at ``path`` into ``folder``."""
    from mobilize.native.build import find_package, runner_for_format, source_path, write_project

    runner = runner_for_format(fmt)
    if runner is None:
        raise BackendUnavailableError(f"no engine runs {fmt} files natively (no NativeRunner declared)")
    package = find_package(runner)
    model = path.resolve()
    if runner.bundled_suffix and model.with_suffix(runner.bundled_suffix).is_file():
        model = model.with_suffix(runner.bundled_suffix)  # the bundled program beside the file
    folder = folder.resolve()
    write_project(folder, package, PROJECT, "main.cpp", source_path(runner, runner.app_source).read_text(),
                  runner.app_headers)
    sample, input_source = _sample(spec, data, seed)
    (folder / "input.raw").write_bytes(sample.float().contiguous().numpy().tobytes())
    frame_config = _write_frame(folder, spec, sample) if runner.frames else None
    defines = runner.app_defines.get(default_runtime(fmt) or "", {})
    (folder / "model_info.h").write_text(_model_info(model, defines, folder / "input.raw", spec, frame_config))
    app = EmittedApp(folder, model, str(fmt), input_source)
    (folder / "README.md").write_text(_readme(app, runner, path.resolve(), spec))
    return app


def _sample(spec: InputSpec, data: str | None, seed: int):
    if data is not None:
        from mobilize.sources.data import open_data

        x, _ = next(iter(open_data(data).batches(spec, limit=spec.shape[0])))
        return x, f"data:{data}"
    return make_random_inputs([spec], seed)[0], f"random-with-seed:{seed}"


def _write_frame(folder: Path, spec: InputSpec, sample) -> str | None:
    """``frame.nv21`` (640x480): the input sample, upscaled by a whole factor into the centre of the frame
    (the converter's centre crop gets it back), else a synthetic scene; returns the converter's config line.
    None for an input that is not one (1,3,H,W) image."""
    import numpy as np
    from PIL import Image

    from mobilize.camera import IMAGENET_MEAN, IMAGENET_STD
    from mobilize.camera.encode import encode_frame, moving_pattern
    from mobilize.camera.frames import frame_config_for, native_config, parse_frame_spec

    frame_spec = parse_frame_spec(FRAME_SPEC)
    shape = spec.shape
    if len(shape) != 4 or shape[:2] != (1, 3) or shape[2] > frame_spec.height or shape[3] > frame_spec.height:
        return None
    cfg = frame_config_for(frame_spec, spec)
    if spec.dtype == "float":
        x = sample[0].float().permute(1, 2, 0).numpy() * np.array(IMAGENET_STD) + np.array(IMAGENET_MEAN)
        image = np.clip(np.round(x * 255), 0, 255).astype(np.uint8)
        k = min(frame_spec.height // shape[2], frame_spec.width // shape[3])
        big = np.asarray(Image.fromarray(image).resize((shape[3] * k, shape[2] * k), Image.NEAREST))
        rgb = np.zeros((frame_spec.height, frame_spec.width, 3), np.uint8)
        top, left = (frame_spec.height - big.shape[0]) // 2, (frame_spec.width - big.shape[1]) // 2
        rgb[top:top + big.shape[0], left:left + big.shape[1]] = big
    else:
        rgb = moving_pattern(frame_spec.height, frame_spec.width, 0)
    (folder / "frame.nv21").write_bytes(encode_frame(rgb, cfg.layout))
    return native_config(cfg)


def _c_string(text: str) -> str:
    return '"' + re.sub(r'(["\\])', r"\\\1", text) + '"'


def _model_info(model: Path, defines: Mapping[str, str], raw: Path, spec: InputSpec,
                frame_config: str | None = None) -> str:
    frame = [
        f"#define MOBILIZE_FRAME_PATH {_c_string(str(raw.with_name('frame.nv21')) if frame_config else '')}",
        "// The camera stream: frame geometry, resize and normalization (key=value, camera_convert.h); the output",
        "// size, layout and dtype come from the program's declared input.",
        f"#define MOBILIZE_FRAME_CONFIG {_c_string(frame_config or '')}",
    ]
    return "\n".join([
        "// Written by mobilize optimize --emit-app: what this app loads when run with no arguments.",
        "#pragma once",
        f"#define MOBILIZE_MODEL_PATH {_c_string(str(model))}",
        f"#define MOBILIZE_INPUT_PATH {_c_string(str(raw))}",
        f"#define MOBILIZE_INPUT_DIMS {{{', '.join(str(d) for d in spec.shape)}}}",
        *(f"#define {name} {value}" for name, value in defines.items()),
        *frame,
        "",
    ])


def _readme(app: EmittedApp, runner: NativeRunner, artifact: Path, spec: InputSpec) -> str:
    runtime = runner.display_name
    return f"""# App skeleton for {artifact.name}

`main.cpp` loads `{app.artifact.name}` with {runtime}, feeds one input, prints the top-5 outputs
and the median latency of 20 runs.  Built against the libraries in the installed Python wheel;
see the top of `CMakeLists.txt` for an Android NDK or iOS build of the same runtime.

    {app.build_command}
    {app.binary}                                  # the default model and input (model_info.h)
    {app.binary} {artifact} input.raw        # any model file, any raw input

`input.raw` is one input ({', '.join(map(str, spec.shape))}, float32, row-major) from {app.input_source}.
""" + ("" if not runner.frames else f"""
Camera frames (`camera_convert.h`, `frame_loop.h`): `{app.binary} --frame [FRAME.nv21] [--iter N]` converts a
raw {FRAME_SPEC} frame (`frame.nv21`: the same sample in the middle of the frame; the stream's settings are
`MOBILIZE_FRAME_CONFIG` in `model_info.h`) straight into the program's input buffer, runs it, and prints the
top-5, each stage's median and share, and the summary line.
""")
