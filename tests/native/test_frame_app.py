"""Frame to answer in C++: an emitted ExecuTorch app run on its raw NV21 frame (``app --frame``), and
``bench --native --frames`` on the same frame, name the same top-1 as the Python path (the Python
converter and the ExecuTorch Python runtime) - and, since the frame holds a real held-out digit, the
digit itself.  Exporting the default model and building the app take ~1-2 min: slow."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest
import torch

from mobilize.bench.harness import BenchConfig
from mobilize.camera import FrameConverter
from mobilize.camera.frames import frame_config_for, parse_frame_spec
from mobilize.native.app import FRAME_SPEC, emit_apps
from mobilize.native.frames import bench_native_frames
from mobilize.pipeline.recipe import Recipe
from mobilize.runtimes.base import open_session
from mobilize.sources.data import open_data
from mobilize.core.inputs import InputSpec
from mobilize.sources.models import resolve_model


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from mobilize.api import optimize

    tmp = tmp_path_factory.mktemp("frame-app")
    recipe = Recipe.from_dict({"name": "frame-app", "passes": ["fuse"], "exports": ["executorch"]})
    pte = optimize("zoo:digits_mobilenet_v2", recipe, out_dir=tmp / "out")["artifacts"][0]["artifact"]
    apps, notes = emit_apps([{"artifact": pte, "format": "executorch"}], tmp / "apps", data="digits:test")
    assert len(apps) == 1 and not notes
    done = subprocess.run(apps[0].build_command, shell=True, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return apps[0]


@pytest.mark.slow
def test_emitted_app_on_a_raw_nv21_frame_gives_the_python_top1(app):
    frame = (app.folder / "frame.nv21").read_bytes()
    pte = str(app.artifact)
    cfg = frame_config_for(parse_frame_spec(FRAME_SPEC), InputSpec((1, 3, 96, 96)))
    x = torch.from_numpy(FrameConverter(cfg)(frame))
    with open_session(resolve_model(pte), threads=1) as session:
        python_top1 = int(session.run([x])[0].argmax())
    _, label = next(iter(open_data("digits:test").batches(InputSpec((1, 3, 96, 96)), limit=1)))

    done = subprocess.run([str(app.binary), "--frame", "--iter", "5"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    text = done.stdout
    assert int(re.search(r"^top-1: (\d+)$", text, re.M).group(1)) == python_top1 == int(label[0]), text
    for stage in ("convert", "infer", "answer"):
        assert re.search(rf"^{stage}\s+[0-9.]+\s+[0-9.]+%$", text, re.M), text
    assert re.search(r"^Main run finished\. Microseconds per iter: [0-9.]+\. Iters per second: [0-9.]+$", text, re.M)

    report = bench_native_frames(pte, BenchConfig(warmup=1, iterations=3, threads=1),
                                 spec=parse_frame_spec(FRAME_SPEC), source=str(app.folder / "frame.nv21"),
                                 echo=lambda line: None)
    assert report["frames"]["first_frame_top_k"][0][0] == python_top1
    assert set(report["frames"]["stages"]) == {"convert", "infer", "answer"}
    # The native loop's last output is the model on that frame, as the Python runtime computes it.
    torch.testing.assert_close(report["_outputs"][0].reshape(-1), session_scores(pte, x), atol=1e-4, rtol=1e-4)
    assert np.argmax(report["_outputs"][0].numpy()) == python_top1


def session_scores(pte: str, x: torch.Tensor) -> torch.Tensor:
    with open_session(resolve_model(pte), threads=1) as session:
        return session.run([x])[0].reshape(-1)


@pytest.mark.slow
def test_channels_last_program_gets_nhwc_from_the_converter(run_cli, tmp_path):
    """A .pte whose input is channels-last: the C++ converter writes NHWC straight into the program's
    input, the Python converter hands NHWC memory to the runtime without a copy, and both answer alike
    (a wrong layout would scramble the 4-D output)."""
    from mobilize.camera.bench import bench_frames

    code, _, err = run_cli("optimize", "zoo:conv_bn_relu", "--input_dims", "1,3,32,32", "--input_memory_format",
                           "channels_last", "--recipe", "executorch-fp32", "-o", tmp_path)
    assert code == 0, err
    pte = str(next(tmp_path.glob("*.pte")))
    config, spec = BenchConfig(warmup=1, iterations=3, threads=1), parse_frame_spec("nv21:320x240:270")
    native = bench_native_frames(pte, config, spec=spec, echo=lambda line: None)["frames"]
    python = bench_frames(pte, config, spec=spec, echo=lambda line: None)["frames"]
    assert native["output_layout"] == python["output_layout"] == "nhwc" and python["feed_shares_buffer"]
    assert [c for c, _ in native["first_frame_top_k"]] == [c for c, _ in python["first_frame_top_k"]]
    np.testing.assert_allclose([v for _, v in native["first_frame_top_k"]],
                               [v for _, v in python["first_frame_top_k"]], rtol=1e-5)
