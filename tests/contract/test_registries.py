"""Contract tests generated from the registries: adding a runtime or zoo model adds it here."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from mobilize.core.artifact import Artifact
from mobilize.core.backend import backend_for_runtime
from mobilize.core.errors import BackendUnavailableError, ConfigError
from mobilize.core.packages import missing
from mobilize.runtimes import RUNTIMES
from mobilize.runtimes.base import RuntimeOptions
from mobilize.sources.models import ModelSource, resolve_model
from mobilize.zoo import ZOO
from tests.conftest import tiny_input, tiny_model

FIXTURE_FORMATS = ("eager", "torchscript", "lite", "exported_program", "executorch", "onnx", "tflite")
"""What the shared ``artifacts`` fixture holds (a TinyNet per format; ``eager``: the module itself)."""


def contract_case(name: str) -> tuple[str, str] | None:
    """How runtime ``name`` is tested, read from its engine: ``("exporter", KEY)`` where the engine declares its case
    (``Backend.contract``: the tiny model exported with that exporter), else ``("fixture", FORMAT)`` for the first
    of its formats the shared fixture holds; None: no case.  A new engine's runtime gets a case with no edit here."""
    backend = backend_for_runtime(name)
    if name in backend.contract:
        return "exporter", backend.contract[name]
    fmt = next((f for f in RUNTIMES.get(name).formats if f in FIXTURE_FORMATS), None)
    return ("fixture", fmt) if fmt else None


def test_every_runtime_has_a_contract_case():
    lacking = [n for n in RUNTIMES.names() if contract_case(n) is None]
    assert not lacking, (f"runtimes that read none of the fixture's formats {FIXTURE_FORMATS} and whose engine "
                         f"declares no case (Backend.contract): {lacking}")


def _contract_target(name: str, request, tmp_path):
    """The tiny model as runtime ``name``'s contract case says: the module, a fixture file, or a file exported with
    the engine's own exporter."""
    from mobilize.core.context import Context
    from mobilize.core.inputs import InputSpec
    from mobilize.exporters import EXPORTERS
    from tests.conftest import INPUT_SHAPE

    how, what = contract_case(name)
    if how == "exporter":
        return EXPORTERS.get(what)().export(tiny_model(), Context(input_specs=[InputSpec(INPUT_SHAPE)]), tmp_path / "tiny")
    if what == "eager":
        return ModelSource(tiny_model(), "tiny")
    return Artifact.from_file(request.getfixturevalue("artifacts")[what])


def _judge_float(outputs, reference):
    """The verify core's float rule (fp32 file vs its model: ``float-sqnr``), the one every fp32 file meets."""
    from mobilize.accuracy.metrics import compare_outputs
    from mobilize.accuracy.verify import DEFAULT_POLICY

    comparison = compare_outputs([[o.float() for o in outputs]], [[reference]])
    assert comparison.sqnr_db >= DEFAULT_POLICY.float_min_sqnr_db, comparison.sqnr_db


@pytest.mark.parametrize("name", RUNTIMES.names())
def test_runtime_contract(name, request, tmp_path):
    cls = RUNTIMES.get(name)
    assert cls.name == name and set(cls.formats) >= {f for f, r in backend_for_runtime(name).formats.items() if r == name}
    if missing(cls.packages):
        with pytest.raises(BackendUnavailableError, match="pip install"):
            cls.check_available()
        return
    target = _contract_target(name, request, tmp_path)
    x = tiny_input()
    reference = tiny_model()(x)
    session = cls.load(target, RuntimeOptions(threads=1))
    try:
        outputs = session.run([x])
        assert len(outputs) == 1 and outputs[0].shape == reference.shape
        _judge_float(outputs, reference)
        session.set_threads(2)
        _judge_float(session.run([x]), reference)
    finally:
        session.close()


@pytest.mark.parametrize("name", ZOO.names())
def test_zoo_model_builds_and_runs(name):
    entry = ZOO.get(name)
    source = resolve_model(f"zoo:{name}")
    assert not source.module.training
    spec = entry.input_specs[0]
    if spec.torch_dtype.is_floating_point:  # an image model: a small image of the declared layout
        shape = list(spec.shape)
        shape[-2:] = [64, 64]
        x = torch.randn(shape)
    else:  # token ids: the declared shape, ids in range
        from mobilize.core.inputs import make_random_inputs

        x = make_random_inputs([spec])[0]
    with torch.no_grad():
        out = source.module(x)
    assert out.shape[0] == 1 and torch.isfinite(out).all()


def test_registry_lookup_suggests():
    with pytest.raises(ConfigError, match="did you mean: mobilenet_v2"):
        ZOO.get("mobilenetv2")


def test_toy_classifier_widths():
    model = ZOO.get("toy_classifier").build()
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size == (1, 1)]
    assert [c.out_channels for c in convs][0] == 18 and convs[-1].out_channels == 1154
    assert model.classifier.out_features == 1000


def test_import_is_cheap():
    code = "import sys, mobilize; print(sorted(m for m in ('torch', 'onnxruntime', 'executorch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# Every exporter: export the tiny model, load it with the format's default runtime, match eager.
EXPORTER_OPTIONS: dict[str, dict] = {}  # per-exporter options for the contract case (none needed so far)


def test_every_recipe_and_plan_parses():
    from mobilize.plans.plan import builtin_plan_names, load_plan
    from mobilize.pipeline.recipe import builtin_recipe_names, load_recipe

    assert "seed" in builtin_recipe_names() and "default" in builtin_plan_names()
    for name in builtin_recipe_names():
        load_recipe(name)
    for name in builtin_plan_names():
        load_plan(name)


@pytest.mark.parametrize("name", __import__("mobilize.exporters", fromlist=["EXPORTERS"]).EXPORTERS.names())
def test_exporter_contract(name, tmp_path):
    from mobilize.exporters import EXPORTERS
    from mobilize.core.context import Context
    from mobilize.runtimes.base import open_session
    from mobilize.core.inputs import InputSpec
    from tests.conftest import INPUT_SHAPE

    cls = EXPORTERS.get(name)
    from mobilize.accuracy.verify import Kind, compare_outputs, judge

    assert cls.name == name and cls.suffix.startswith(".")
    exporter = cls(cls.Config(**EXPORTER_OPTIONS.get(name, {})))
    ctx = Context(input_specs=[InputSpec(INPUT_SHAPE)])
    art = exporter.export(tiny_model(), ctx, tmp_path / "tiny")
    assert art.path.exists() and art.path.suffix == cls.suffix and art.manifest_path.exists()
    assert [f for f in tmp_path.iterdir() if f.name.startswith(".")] == [], "no temp files left behind"
    x = tiny_input()
    with open_session(art, threads=1) as session:
        got = session.run([x])
    assert exporter.expectation(ctx).kind == Kind.FLOAT
    verdict = judge(compare_outputs([got], [[tiny_model()(x)]]), Kind.FLOAT)
    assert verdict.ok, verdict.reason


def test_executorch_reused_output_buffers(artifacts):
    """Outputs read straight from the program's buffers match the copying path, and values handed
    out by `run` are not overwritten by the next run."""
    from mobilize.runtimes.base import open_session

    art = Artifact.from_file(artifacts["executorch"])
    x1, x2 = tiny_input(), tiny_input() * 2
    with open_session(art, threads=1) as plain:
        expected1, expected2 = plain.run([x1])[0], plain.run([x2])[0]
    with open_session(art, options=RuntimeOptions(threads=1, extra={"reuse_outputs": True})) as reuse:
        got1 = reuse.run([x1])[0]
        got2 = reuse.run([x2])[0]
    torch.testing.assert_close(got1, expected1, atol=0, rtol=0)
    torch.testing.assert_close(got2, expected2, atol=0, rtol=0)


# Every pass: runs on a copy (the input is untouched), records its time and says what it did.
PASS_OPTIONS: dict[str, dict] = {}
"""Per-pass options for the contract case, where the defaults need something the tiny model lacks."""
PASS_EXCLUDED: dict[str, str] = {}
"""Passes the contract case cannot run, each with the reason."""


@pytest.mark.parametrize("name", __import__("mobilize.passes", fromlist=["PASSES"]).PASSES.names())
def test_pass_contract(name):
    import copy

    from mobilize.core.context import Context
    from mobilize.passes import PASSES
    from mobilize.core.inputs import InputSpec
    from tests.conftest import INPUT_SHAPE

    if name in PASS_EXCLUDED:
        pytest.skip(PASS_EXCLUDED[name])
    cls = PASSES.get(name)
    assert cls.name == name
    model = tiny_model()
    before = copy.deepcopy(model.state_dict())
    ctx = Context(input_specs=[InputSpec(INPUT_SHAPE)])
    out = cls(cls.Config(**PASS_OPTIONS.get(name, {})))(model, ctx)
    assert out is not model, "a pass works on a copy unless its config says inplace"
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()), "the input module was modified"
    assert name in ctx.timings_ms and ctx.timings_ms[name] >= 0 and ctx.applied[-1] == name
    assert any(n.startswith(f"{name}:") for n in ctx.notes), f"pass '{name}' left no note saying what it did"
    with torch.inference_mode():
        got = out(tiny_input())
    assert got.shape == tiny_model()(tiny_input()).shape
