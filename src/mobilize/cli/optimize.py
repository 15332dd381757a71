"""``mobilize optimize MODEL --recipe NAME|FILE [--data SRC] [--engine E] -o DIR``.

    $ mobilize optimize zoo:mobilenet_v2 --recipe seed --data sample-photos -o out/
    pass fuse ...
    pass quantize ...
    export torchscript ...
    export lite ...
    out/mobilenet_v2-seed.pt   3.6 MB  torchscript  verified (max abs 0.0e+00)
    out/mobilenet_v2-seed.ptl  3.6 MB  lite         verified (max abs 0.0e+00)
"""

from __future__ import annotations

import argparse
import json

from mobilize.cli.bench import _flag


def add_parser(sub) -> None:
    p = sub.add_parser("optimize", help="prepare and export a model with a recipe",
                       description="Run a recipe (passes + exporters) and write artifacts with manifests.")
    p.add_argument("model", metavar="MODEL", help="zoo:NAME, file.py:Class, pkg.mod:factory, or a model file")
    p.add_argument("--recipe", default="seed", help="built-in recipe name or a .yaml/.json file (default: seed)")
    p.add_argument("--data", metavar="SRC", help="calibration data: digits, sample-photos, DIR or FILE.npz")
    p.add_argument("--engine", help="quantization engine for the recipe's quantize steps (x86, fbgemm, qnnpack)")
    p.add_argument("-o", "--output", default="out", metavar="DIR", help="output folder (default: out)")
    _flag(p, "input_dims", help='input shapes, e.g. "1,3,224,224"')
    _flag(p, "input_type", help="input types, e.g. float")
    _flag(p, "input_memory_format", choices=["contiguous_format", "channels_last"])
    p.add_argument("--no-verify", action="store_true", help="skip running each artifact against the prepared model")
    p.add_argument("--json", metavar="FILE", help="write the result as JSON")
    p.add_argument("--trust-pickle", action="store_true", help="allow unpickling a torch.save()d model file")
    p.add_argument("--list-recipes", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from mobilize.api import optimize
    from mobilize.artifact import atomic_write_text
    from mobilize.sources.inputs import parse_input_specs

    specs = parse_input_specs(args.input_dims, args.input_type, args.input_memory_format) if args.input_dims else None
    result = optimize(args.model, args.recipe, out_dir=args.output, data=args.data, engine=args.engine,
                      input_specs=specs, trust_pickle=args.trust_pickle, verify=not args.no_verify)
    for note in result["notes"]:
        print(f"note: {note}")
    for a in result["artifacts"]:
        v = a.get("verify")
        check = f"verified (max abs {v['max_abs']:.1e} <= {v['tolerance']:.0e})" if v else "not verified"
        print(f"{a['artifact']}  {a['size_bytes'] / 1e6:.2f} MB  {a['format']}  {check}")
        for note in a["notes"]:
            if note not in result["notes"]:
                print(f"  note: {note}")
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=2, default=str) + "\n")
    return 0
