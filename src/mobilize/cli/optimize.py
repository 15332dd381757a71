"""``mobilize optimize MODEL --recipe NAME|FILE [--data SRC] [--engine E] -o DIR``.

    $ mobilize optimize zoo:digits_mobilenet_v2 --recipe seed --data digits -o out/
    out/digits_mobilenet_v2-seed.pt  0.90 MB  torchscript  verified (fidelity vs the model it was exported from:
      max abs 0.0e+00, SQNR exact (inf dB) >= 60 dB (rule float-sqnr); quality vs the float model: max abs 4.6e-01,
      SQNR 29.3 dB >= 8 dB (rule quantized-sqnr); mean cosine 0.9994 within budget 0.99)
    (and the same for the .ptl; lines wrapped here)
"""

from __future__ import annotations

import argparse

from mobilize.core.jsonfile import dumps_measured
from mobilize.cli.inputs import add_input_flags, add_task_flags, bound_args_from_args, input_specs_from_args
from mobilize.core.target import TARGETS


def add_parser(sub) -> None:
    p = sub.add_parser("optimize", help="prepare and export a model with a recipe",
                       description="Run a recipe (passes + exporters) and write artifacts with manifests.")
    p.add_argument("model", metavar="MODEL", help="zoo:NAME, file.py:Class, pkg.mod:factory, or a model file")
    p.add_argument("--recipe", default="seed", help="built-in recipe name or a .yaml/.json file (default: seed)")
    p.add_argument("--data", metavar="SRC", help="calibration data: digits, sample-photos, DIR or FILE.npz")
    p.add_argument("--engine", help="quantization engine for the recipe's quantize steps (x86, fbgemm, qnnpack)")
    p.add_argument("--target", default="host", choices=list(TARGETS),
                   help="the device the files are for; decides CPU-dependent choices such as ONNX reduce_range and "
                        "the int8 engine (default: this machine, recorded in every manifest)")
    p.add_argument("-o", "--output", default="out", metavar="DIR", help="output folder (default: out)")
    add_input_flags(p, memory_format=True)
    add_task_flags(p, metric=False)  # optimize's quality check is SQNR/cosine; the task says whether top-1 applies
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show the exporters' own stderr output (otherwise kept in DIR/logs/optimize.log)")
    p.add_argument("--emit-app", metavar="DIR",
                   help="also write a minimal C++ app (CMake project) per .pt/.ptl/.pte artifact into DIR; with --target arm64 "
                        "each is also built for aarch64 and run once under QEMU in the arm64 root")
    p.add_argument("--no-verify", action="store_true", help="skip running each artifact against the prepared model")
    p.add_argument("--json", metavar="FILE", help="write the result as JSON")
    p.add_argument("--trust-pickle", action="store_true", help="allow unpickling a torch.save()d model file")
    p.add_argument("--list-recipes", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=run, outputs=[("output", "-o", "folder"), ("json", "--json", "file"),
                                     ("emit_app", "--emit-app", "folder")],
                   inputs=[("model", "MODEL"), ("recipe", "--recipe"), ("data", "--data")])


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from mobilize.api import optimize
    from mobilize.core.artifact import atomic_write_text
    from mobilize.cli.capture import capture_stderr
    from mobilize.cli.progress import Progress

    from mobilize.generation.detect import wants_generation
    from mobilize.sources.reference import ModelRef

    if wants_generation(args.task, ModelRef.parse(args.model)):
        return _optimize_decoder(args)
    specs = input_specs_from_args(args)
    if args.emit_app and args.target == "arm64":  # the apps are built and run in the arm64 root: checked before work
        from mobilize.arm64.run import missing
        from mobilize.core.errors import BackendUnavailableError

        why = missing()
        if why:
            raise BackendUnavailableError(f"--emit-app with --target arm64 builds each app for aarch64 and runs it "
                                          f"under QEMU: {why}", hint="run scripts/setup-arm64.sh, or leave out "
                                                                     "--target arm64 for host apps only")
    progress = Progress()
    log_path = None if args.verbose else Path(args.output) / "logs" / "optimize.log"
    try:
        with capture_stderr(log_path if Path(args.output).is_dir() or not Path(args.output).exists() else None) as log:
            result = optimize(args.model, args.recipe, out_dir=args.output, data=args.data, engine=args.engine,
                              target=args.target, input_specs=specs, trust_pickle=args.trust_pickle,
                              verify=not args.no_verify, progress=progress, log_path=log.path,
                              bound_args=bound_args_from_args(args), task=args.task)
    finally:
        progress.close()
    _print_result(result, log.path)
    if args.emit_app:
        from mobilize.native.app import emit_apps

        apps, notes = emit_apps(result["artifacts"], args.emit_app, data=args.data, input_specs=specs)
        result["apps"] = [app.to_json() for app in apps]
        for app in apps:
            print(app.describe())
        if args.target == "arm64":
            from mobilize.arm64.native import apps_on_arm64

            result["apps_arm64"], arm_notes = apps_on_arm64(apps)
            notes += arm_notes
        for note in notes:
            print(f"note: {note}")
    if args.json:
        atomic_write_text(args.json, dumps_measured(result, indent=2, default=str) + "\n")
    return 0


def _print_result(result: dict, log_path) -> None:
    """The notes, each file with its verdict, where the run's stderr went, and the warnings last."""
    for note in result["notes"]:
        print(f"note: {note}")
    for a in result["artifacts"]:
        print(f"{a['artifact']}  {a['size_bytes'] / 1e6:.2f} MB  {a['format']}  {verdict_text(a.get('verify'))}")
        for note in a["notes"]:
            if note not in result["notes"]:
                print(f"  note: {note}")
    written = _log_lines(log_path)
    if written:  # the model's own stderr lines went there too: said once, not lost without a word
        print(f"note: {written} line(s) written to stderr during the run (the model's own output, the libraries' "
              f"warnings) are in {log_path}")
    for warning in result.get("warnings") or []:  # after the files: the line a reader sees last
        print(warning)


def _log_lines(path) -> int:
    """Non-empty lines in the run's stderr log (0 without one)."""
    try:
        return sum(1 for line in path.read_text(errors="replace").splitlines() if line.strip()) if path else 0
    except OSError:
        return 0


def verdict_text(v: dict | None) -> str:
    """``verified`` only when both halves hold: the file is what its exporter promised (fidelity) and it is within
    the budget against the float model (quality); otherwise the outcome, first."""
    if not v:
        return "not verified"
    halves = []
    order = ("quality", "fidelity") if (v.get("quality") or {}).get("outcome", "OK") != "OK" else ("fidelity", "quality")
    for name in order:  # the half that decided first
        part = v.get(name)
        if part:
            mark = "" if part["outcome"] == "OK" else f"{part['outcome']} "
            halves.append(f"{name} vs {part['against']}: {mark}max abs {part['numbers'].get('max_abs', 0.0):.1e}, "
                          f"{part['reason']}")
    body = "; ".join(halves) or v["reason"]
    if v["outcome"] == "VACUOUS":
        body = f"{v['reason'].split('; fidelity vs')[0]}; {body}"
    return f"verified ({body})" if v["ok"] else f"{v['outcome']} ({body})"


def _optimize_decoder(args: argparse.Namespace) -> int:
    """A causal LM: --recipe names one decoder variant (``executorch-8da4w``, ``onnx-int4`` ...), built with its
    engine's tool and judged token by token like compare does, without the timed rounds."""
    from mobilize.api import compare
    from mobilize.cli.progress import Progress
    from mobilize.compare.config import CompareConfig
    from mobilize.core.artifact import atomic_write_text
    from mobilize.generation.plan import generation_variants

    generation_variants([args.recipe])  # an unknown name is refused before any work, with the variants listed
    progress = Progress()
    try:
        report = compare(args.model, config=CompareConfig(model=args.model, out_dir=args.output, task="generation",
                                                          timed=False), variants=[args.recipe], progress=progress)
    finally:
        progress.close()
    [v] = report["variants"]
    verdict = v.get("verdict") or {}
    why = verdict.get("reason") or "; ".join(v.get("notes") or [])
    if v["outcome"] not in ("OK", "VACUOUS", "OVER_BUDGET"):  # it could not be built or run: said in one line
        from mobilize.core.errors import UserError

        raise UserError(f"{v['name']}: {v['outcome']}: {why}")
    size = f"{v['size_bytes'] / 1e6:.2f} MB" if v.get("size_bytes") else "-"
    tokens = v.get("tokens") or {}
    print(f"{v['artifact']}  {size}  {tokens.get('engine')} {tokens.get('weights')}  {v['outcome']}: {why}")
    if args.json:
        atomic_write_text(args.json, dumps_measured(report, indent=2, default=str) + "\n")
    return 0
