"""The one build path: recipe + model -> prepared module + artifacts; and the one artifact check.

``optimize``, compare's worker (and tune and sweep after them) call :func:`build`; nothing else
runs passes and exporters.  :func:`verify_artifact` runs a built file and the module it came
from on the same inputs and lets the verify core judge them by what the exporter promised.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any, Callable, Iterator

from mobilize.accuracy.verify import DEFAULT_POLICY, Kind, Policy, Verdict, compare_outputs, judge
from mobilize.core.artifact import Artifact
from mobilize.core.context import Context
from mobilize.core.errors import ConfigError
from mobilize.pipeline.recipe import Recipe


@dataclasses.dataclass
class Built:
    """One exported file and what it promises."""

    artifact: Artifact
    kind: Kind
    """Against the prepared module: float (to rounding) or quantized (the exporter quantized it)."""
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Exporter facts for reports (e.g. ExecuTorch's ``delegation``)."""


@dataclasses.dataclass
class BuildResult:
    module: Any
    """The prepared module (after the passes), or the source artifact when the recipe had no passes."""
    context: Context
    artifacts: list[Built]
    recipe: Recipe | None = None
    """The recipe as built (``made_by`` when given), every option the context decided written in
    (:meth:`~mobilize.exporters.base.Exporter.decided`): what rebuilds these files, and what their manifests record."""

    @property
    def quantized(self) -> bool:
        """Whether the result computes in int8 against the float model (a pass or an exporter quantized it)."""
        return self.context.quant.quantized or any(b.kind == Kind.QUANTIZED for b in self.artifacts)

    @property
    def kind(self) -> Kind:
        """What the variant promises against the float model: the strongest of its steps' (an fp16 export is
        REDUCED, judged by the reduced-precision floor, not by the fp32 one; a pruned model is CHANGED)."""
        if self.context.changed_model:
            return Kind.CHANGED
        if self.quantized:
            return Kind.QUANTIZED
        return Kind.REDUCED if any(b.kind == Kind.REDUCED for b in self.artifacts) else Kind.FLOAT


def prepare(model: Any, recipe: Recipe, ctx: Context, echo: Callable[[str], None] | None = None) -> Any:
    """Run the recipe's passes, in order (each on a copy unless its config says inplace)."""
    from mobilize.passes import PASSES

    if recipe.passes and not hasattr(model, "forward"):
        raise ConfigError(f"recipe '{recipe.name}' has passes, which need a PyTorch model; this is a "
                          f"{getattr(model, 'format', type(model).__name__)} file",
                          hint="use a model reference (zoo:, file.py:Class) or a recipe without passes")
    for step in recipe.passes:
        if echo:
            echo(f"pass {step.name}")
        model = PASSES.get(step.name)(step.config)(model, ctx)
    return model


def build(model: Any, recipe: Recipe, ctx: Context, stem: str | Path | None,
          echo: Callable[[str], None] | None = None, made_by: Recipe | None = None) -> BuildResult:
    """Passes, then every exporter of the recipe; artifacts are written as ``stem`` + each suffix.

    ``made_by``: the whole recipe the manifests record, when ``model`` already went through its first steps
    (tune exports one pruned model per runtime, and quantizes the fp32 ONNX file it built)."""
    from mobilize.exporters import EXPORTERS
    from mobilize.pipeline.calibration import StateCarrier

    if recipe.exports and stem is None:
        raise ConfigError(f"recipe '{recipe.name}' exports files but no output path was given")
    ctx.state_carrier = ctx.state_carrier or StateCarrier(model, ctx.input_specs, ctx.input_names)
    exporters = [EXPORTERS.get(step.name)(step.config) for step in recipe.exports]
    pinned = dataclasses.replace(made_by or recipe, exports=tuple(
        _pin(step, exporter.decided(ctx)) for step, exporter in zip(recipe.exports, exporters)))
    with reproducible():
        module = prepare(model, recipe, ctx, echo)
        built = []
        for step, exporter in zip(recipe.exports, exporters):
            if echo:
                echo(f"export {step.name}")
            art = exporter.export(module, ctx, Path(stem), pinned.to_dict())
            expectation = exporter.expectation(ctx)
            built.append(Built(art, expectation.kind, dict(getattr(exporter, "details", None) or {})))
    return BuildResult(module, ctx, built, pinned)


def _pin(step: Any, decided: dict[str, Any]) -> Any:
    """``step`` with the options the context decided for it written into its config."""
    return dataclasses.replace(step, config=dataclasses.replace(step.config, **decided)) if decided else step


BUILD_SEED = 0
"""The seed of torch's generator while a recipe builds (restored after): anything random in a pass or an exporter draws
the same numbers at every build."""


@contextlib.contextmanager
def reproducible() -> Iterator[None]:
    """A recipe rebuilds the same file bit for bit on the same machine.  Its passes and exporters run here on one
    torch thread (how a convolution's sums are split follows the thread count, and a torch session sets the process's
    count as it opens: a calibration maximum one ulp apart would move a scale), with torch's generator seeded
    (:data:`BUILD_SEED`), on the samples in the data's own order; ONNX Runtime calibrates on one thread too
    (:func:`mobilize.backends.onnxruntime.quant.calibrate`), OpenVINO's counter-made node names are renumbered
    (:func:`mobilize.backends.openvino.exporter.canonical_names`), and what the target decided is written into the
    recipe (:attr:`BuildResult.recipe`: tune's int8 winner for --target x86-avx2 left reduce_range to the target and
    rebuilt one quantization step apart on a VNNI host).  The caller's thread count and generator state are restored
    afterwards."""
    import torch

    from mobilize.core.runtime_options import one_thread

    with one_thread(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(BUILD_SEED)
        yield


def verify_inputs(ctx: Context, count: int = 4) -> list[list]:
    """The inputs an artifact is checked on: real samples when there is data, else seeded random ones."""
    if ctx.data is not None:
        return ctx.data.sample_lists(ctx.input_specs, count, ctx.input_names or None)
    return [ctx.example_inputs(seed=123 + i) for i in range(min(count, 2))]


def random_inputs_warning(ctx: Context) -> str | None:
    """Said when files are verified without data: how many seeded random inputs, and why that proves little."""
    if ctx.data is not None:
        return None
    count = len(verify_inputs(ctx))
    return (f"WARNING: each file was verified on {count} seeded random input(s) only (no --data): random inputs prove "
            f"little (a file can match the model on noise and still be wrong on real inputs); give --data with real "
            f"samples (rule verify-random-inputs)")


def verify_artifact(built: Built, module: Any, ctx: Context, policy: Policy = DEFAULT_POLICY, *,
                    float_model: Any = None, quantized: bool = False, task: str | None = None) -> Verdict:
    """Run the artifact and the module it came from on the same inputs; the verify core judges (fidelity).

    With ``float_model`` (the model before the passes) the file is also judged against it (quality: ``quantized``
    says whether the passes quantized the module), the budget is the mean cosine, and a float model whose
    output does not depend on its input makes the verdict VACUOUS.  ``task`` (mobilize.accuracy.tasks): a model
    without classes is never judged on top-1 agreement."""
    from mobilize.accuracy.tasks import without_classes
    from mobilize.accuracy.verify import assess, degenerate_reference

    samples = verify_inputs(ctx)
    got = _outputs(built.artifact, samples)
    reference = None if float_model is None else _outputs(float_model, samples)
    if reference is not None:  # the float model's task decides whether top-1 figures mean anything (and is said)
        from mobilize.accuracy.tasks import resolve_task

        choice = resolve_task(task, reference)
        task = str(choice.task)
        if f"accuracy: {choice.describe()}" not in ctx.notes:
            ctx.notes.append(f"accuracy: {choice.describe()}")
    fidelity = judge(without_classes(compare_outputs(got, _outputs(module, samples)), task), built.kind, policy)
    fidelity = _with_twin_check(fidelity, built)
    if float_model is None:
        return fidelity
    c = without_classes(compare_outputs(got, reference), task)
    kind = Kind.CHANGED if ctx.changed_model else Kind.QUANTIZED if quantized else built.kind
    return assess(c, kind, policy, fidelity=fidelity,
                  reference_warning=degenerate_reference(reference, policy, task=task)).verdict


def _with_twin_check(fidelity: Verdict, built: Built) -> Verdict:
    """An NNAPI file's fidelity half: its host check against its CPU twin (the same traced, quantized graph on the
    lite interpreter; for an int8 file rule output-steps, in output quantization steps) is the stricter comparison
    and decides, with the check against the prepared module said beside it.  Any other file: ``fidelity``."""
    from mobilize.core.outcome import Outcome

    twin = ((built.details.get("nnapi") or {}).get("host_check") or {}).get("end_to_end") or {}
    verdict = twin.get("verdict")
    if not verdict or not fidelity.ok:
        return fidelity
    return Verdict(Outcome(verdict["outcome"]), verdict["rule"],
                   f"vs its CPU twin (the same graph on the lite interpreter), end to end: {twin['summary']}; vs the "
                   f"prepared module: {fidelity.reason}", {**fidelity.numbers, "cpu_twin": verdict.get("numbers")})


def _outputs(model: Any, samples: list[list]) -> list[list]:
    import torch

    from mobilize.runtimes.base import flatten_outputs, open_session

    if hasattr(model, "forward"):
        from mobilize.runtimes.held_state import call_reset, reset_method

        reset = reset_method(model)
        if reset:  # state kept in the module: each side's calls start a stream
            call_reset(model, reset)
        with torch.inference_mode():
            return [flatten_outputs(model(*inputs)) for inputs in samples]
    with open_session(model) as session:
        session.reset_state()
        return [session.run(inputs) for inputs in samples]
