"""The entry of ``compare`` (``mobilize.compare()`` and the CLI): check the config, fit the plan to the model,
fill in data and inputs, then run the plan (:mod:`mobilize.compare.plan_run`) with report.json and report.html
written as it goes.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from mobilize.core.checks import default_threads
from mobilize.core.errors import ConfigError
from mobilize.core.paths import check_output_dir
from mobilize.report.json_report import SCHEMA_VERSION
from mobilize.plans.facts import calibration_for, check_data_fits, default_data, model_facts_isolated
from mobilize.generation.detect import wants_generation
from mobilize.sources.models import ModelSource
from mobilize.sources.reference import ModelRef


def compare(model: str | None = None, plan: Any = "default", config: Any = None, *, variants: Sequence[str] = (),
            progress: Callable[[int, int, str], None] | None = None) -> dict[str, Any]:
    """Run every variant of a plan on real data; write report.json and report.html as it goes.

    ``config`` is a :class:`~mobilize.compare.config.CompareConfig`; its ``data``, ``calibration``,
    ``input_specs`` and ``threads`` are filled in here when left empty."""
    import datetime

    import mobilize
    from mobilize.compare.config import CompareConfig
    from mobilize.core.target import Target, host_cpu
    from mobilize.zoo import DEFAULT_MODEL

    cfg = config or CompareConfig(model="")
    model = model or cfg.model or f"zoo:{DEFAULT_MODEL}"
    ref = ModelRef.parse(model)  # the one parse: the checks and every child get the typed reference
    if wants_generation(cfg.task, ref):
        meta = {"schema_version": SCHEMA_VERSION, "mobilize_version": mobilize.__version__,
                "created": datetime.datetime.now().isoformat(timespec="seconds"), "host_cpu": host_cpu().to_json()}
        return _generation(ref, cfg, plan, variants, progress, meta)
    fit = plan == "default" and not variants  # the built-in default adapts to the model; a named plan runs as given
    _check_numbers(cfg)
    target = Target.parse(cfg.target)
    out = check_output_dir(cfg.out_dir)
    facts = model_facts_isolated(ref, cfg.trust_pickle, len(cfg.input_specs), cfg.timeout_s, dict(cfg.bound_args))
    plan, plan_notes = _load_plan(model, plan, variants, facts["format"])
    specs = _input_specs(model, cfg.input_specs or facts["input_specs"])
    names = facts["input_names"]
    if fit and facts["format"] == ModelSource.format:
        plan, plan_notes = _fit_default_plan(plan, facts, specs)
    _check_frames(cfg.frames, specs)
    data = cfg.data or default_data(model, specs)
    if data is not None:
        check_data_fits(specs, data, names)
    calibration, note = (cfg.calibration, None) if cfg.calibration else calibration_for(data)
    cfg = dataclasses.replace(cfg, model=model, data=data, calibration=calibration, input_specs=tuple(specs),
                              out_dir=str(out), threads=cfg.threads or default_threads(), target=target.name,
                              input_names=tuple(names))
    meta = {"schema_version": SCHEMA_VERSION, "mobilize_version": mobilize.__version__,
            "created": datetime.datetime.now().isoformat(timespec="seconds"),
            "input_specs": [s.to_json() for s in specs], "target": target.to_json(), "host_cpu": host_cpu().to_json(),
            "inputs": f"data:{data}" if data else "random-with-seed (no --data: accuracy on seeded random inputs)",
            **({"bound_args": dict(cfg.bound_args)} if cfg.bound_args else {}),
            "notes": ([note] if note else []) + plan_notes}

    return _run_and_write(cfg, plan, out, meta, progress, ref)


def _check_numbers(cfg: Any) -> None:
    from mobilize.core.checks import check_at_least, check_positive, check_threads

    check_at_least(cfg.iterations, 1, "--iter")
    check_at_least(cfg.rounds, 1, "--rounds")
    check_at_least(cfg.accuracy_samples, 1, "--accuracy-samples")
    check_positive(cfg.timeout_s, "--timeout", " seconds")
    check_positive(cfg.time_budget_s, "--time-budget", " seconds")
    check_threads(cfg.threads)


def _check_frames(frames: dict | None, specs: Sequence[Any]) -> None:
    """``--frames`` (if given) before any work: the spec, the frames file and the model's one (1,3,H,W) input, which
    the frame must be large enough to fill (one-line errors, exit 2)."""
    from mobilize.camera.frames import frame_config_for, load_frames, parse_frame_spec

    if not frames:
        return
    if len(specs) != 1:
        raise ConfigError(f"--frames feeds one image input; the model takes {len(specs)}",
                          hint="leave out --frames, or give a model with one (1,3,H,W) input")
    cfg = frame_config_for(parse_frame_spec(frames["spec"]), specs[0], frames.get("resize", "nearest"))
    if frames.get("source"):
        load_frames(cfg, frames["source"])


def _load_plan(model: str, plan: Any, variants: Sequence[str], model_format: str) -> tuple[Any, list[str]]:
    """The plan to run (for a file made elsewhere, the variants that build from it), and notes saying what
    was left out."""
    from mobilize.plans.plan import Plan, load_plan

    plan_notes: list[str] = []
    default = plan == "default"
    if model_format != ModelSource.format:  # a file made elsewhere is the reference; the variants are what builds from it
        from mobilize.plans.file import plan_for_file

        plan, left_out = plan_for_file(plan, model_format)
        plan_notes = [f"plan: left out {names}: {why}" for names, why in left_out]
        plan_notes.append(f"reference: {model} itself, run in its default runtime (lint reads PyTorch modules only)")
    plan = plan if isinstance(plan, Plan) else load_plan(plan)
    if variants:
        if default and model_format == ModelSource.format:  # what fitting the default plan would add can be asked for by name
            from mobilize.plans.fit import with_fitted_additions

            plan = with_fitted_additions(plan)
        plan = plan.select(list(variants))
    return plan, plan_notes


def _input_specs(model: str, specs: Sequence[Any]) -> list[Any]:
    """The model's input specs; every shape must be known and fixed."""
    specs = list(specs)
    if not specs:
        raise ConfigError("the model's input shape is unknown", hint='give --input_dims, e.g. "1,3,224,224"')
    dynamic = [str(s) for s in specs if any(d < 0 for d in s.shape)]
    if dynamic:
        raise ConfigError(f"{model} has inputs with dynamic dimensions ({'; '.join(dynamic)})",
                          hint='give every input\'s shape with --input_dims, e.g. "1,3,224,224"')
    return specs


def _fit_default_plan(plan: Any, facts: dict[str, Any], specs: Sequence[Any]) -> tuple[Any, list[str]]:
    """The default plan fitted to the model (:mod:`mobilize.plans.fit`), and notes saying what changed and why."""
    from mobilize.plans.fit import fit_plan

    before = {v.name for v in plan.variants}
    fitted, left_out = fit_plan(plan, {"layers": facts.get("layers"), "input_types": [s.dtype for s in specs],
                                       "input_ranks": [len(s.shape) for s in specs]})
    notes = [f"plan: left out {name}: {why}" for name, why in left_out]
    added = [v.name for v in fitted.variants if v.name not in before]
    if added:
        layers = facts.get("layers") or {}
        notes.append(f"plan: added {', '.join(added)}: a Linear/attention model ({layers.get('linear', 0)} Linear, "
                     f"{layers.get('attention', 0)} attention, no conv) quantizes with dynamic int8")
    return fitted, notes


RUN_FILES = ("report.json", "report.html", "artifacts", "logs")
"""What a compare run writes into its output folder (and removes from an earlier run there first)."""


def _generation(ref: ModelRef, cfg: Any, plan: Any, variants: Sequence[str],
                progress: Callable[[int, int, str], None] | None, meta: dict[str, Any]) -> dict[str, Any]:
    """A causal LM: the generation task through the same run as every task (:class:`~mobilize.compare.plan_run.
    PlanRun`): every engine's decoder file built, judged token by token and timed in tokens; reports written as it
    goes."""
    from mobilize.generation.model import check_decoder_lengths
    from mobilize.generation.plan import decoder_plan, default_names
    from mobilize.lowering.causal_lm import saved_parameters
    from mobilize.sources.reference import RefKind
    from pathlib import Path

    if cfg.frames:
        raise ConfigError("--frames times camera frames through an image model; a causal LM is timed in tokens",
                          hint="leave out --frames")
    if plan not in ("default", "generation", "generation-large"):
        raise ConfigError(f"a causal LM runs the generation plan (every engine's decoder files), not '{plan}'",
                          hint="leave --plan out, and pick files with --variant")
    _check_numbers(cfg)
    check_decoder_lengths(cfg.prompt_tokens, cfg.gen_tokens, cfg.eval_tokens, cfg.eval_sequences)
    chosen, why = (list(variants), []) if variants else default_names(
        saved_parameters(Path(ref.path)) if ref.kind == RefKind.MODEL_FOLDER else None, plan)
    decoders, notes = decoder_plan(chosen, name="generation-large" if why else "generation")
    notes = why + notes
    if not decoders.variants:
        raise ConfigError("no decoder variant can run here: " + "; ".join(n.removeprefix("plan: left out ")
                                                                          for n in notes))
    out = check_output_dir(cfg.out_dir)
    why = "--task generation" if cfg.task == "generation" else "a causal LM (its config names a causal LM class)"
    decoding = cfg.decoding(why)  # before task is set below: it says whether --task was given
    cfg = dataclasses.replace(cfg, model=ref.text, out_dir=str(out), threads=cfg.threads or default_threads(),
                              unit="token", task="generation", iterations=cfg.gen_tokens * cfg.rounds)
    meta["notes"] = notes
    meta["inputs"] = f"text:{cfg.data}" if cfg.data else "held-out text (see generation.held_out)"

    return _run_and_write(cfg, decoders, out, meta, progress, ref, decoding)


def _run_and_write(cfg: Any, plan: Any, out: Any, meta: dict[str, Any], progress: Any, ref: ModelRef,
                   decoding: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the plan with report.json and report.html written after every step, ``meta`` filled in; the folder holds
    this run's results only (an older report or its artifacts beside a new one misleads)."""
    from mobilize.compare.plan_run import run_plan
    from mobilize.core.paths import remove_previous
    from mobilize.report.json_report import write_reports

    def save(report: dict[str, Any]) -> None:
        for key, value in meta.items():
            report.setdefault(key, value)
        write_reports(report, out)

    removed = remove_previous(out, RUN_FILES)
    if removed:
        meta["notes"].append(f"removed the previous run's {', '.join(removed)} from {out} before this run")
    report = run_plan(cfg, plan, progress=progress, on_update=save, ref=ref, decoding=decoding)
    save(report)
    return report
