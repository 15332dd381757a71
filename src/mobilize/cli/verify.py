"""``mobilize verify FILE --on arm64|DEVICE``: one file's accuracy check on arm64 kernels under QEMU or on a device
over SSH (its own kernels), beside the host's.

    $ mobilize verify out/compare/artifacts/onnx-int8/model.onnx --on arm64 --model zoo:digits_mobilenet_v2 \\
          --data digits:test

Exit codes: 0 checked (whatever the verdicts); 2 bad input, no arm64 root (run scripts/setup-arm64.sh) or a device
that cannot be reached; 1 a bug in mobilize.
"""

from __future__ import annotations

import argparse

from mobilize.core.jsonfile import dumps_measured
from mobilize.cli.inputs import add_input_flags, input_specs_from_args
from mobilize.accuracy.verify import DEFAULT_POLICY


def add_parser(sub) -> None:
    p = sub.add_parser("verify", help="check one file's outputs on another CPU's kernels (arm64 under QEMU, or a "
                                      "device over SSH)",
                       description="Run FILE on the same samples on the host and inside the arm64 root (QEMU user "
                                   "emulation, built by scripts/setup-arm64.sh) or on a device over SSH (its own "
                                   "kernels, mobilize devices add), judge both with the verify core, "
                                   "and say how far the device's outputs are from the host's. Emulated times are not "
                                   "latency and are not shown as such.")
    p.add_argument("file", metavar="FILE", help="a .pte, .onnx, .pt/.ptl (TorchScript), .tflite or OpenVINO file")
    p.add_argument("--on", required=True, metavar="DEVICE",
                   help="where to check it: arm64 (the QEMU root), ssh://[user@]host[:port] or a name from `mobilize "
                        "devices add` (the device's own kernels; --cpu is arm64's only)")
    p.add_argument("--model", metavar="REF", help="the float model the file was made from: the reference (default: "
                                                  "the same file on the host)")
    p.add_argument("--data", metavar="SRC", help="samples: digits:test, sample-photos, DIR, FILE.npz (default: seeded "
                                                 "random inputs)")
    p.add_argument("--samples", type=int, default=64, help="samples to run (default 64; ~0.1-0.5 s each emulated)")
    p.add_argument("--kind", choices=["float", "reduced", "quantized", "changed"],
                   help="what the file promises (default: from its manifest's recipe, else float)")
    p.add_argument("--cpu", metavar="MODEL",
                   help="QEMU CPU model: cortex-a76 (default), cortex-a72, cortex-a53, neoverse-n1, max")
    p.add_argument("--runtime", help="runtime to use (default: the one for the file's format)")
    p.add_argument("--max-drop", type=float, default=DEFAULT_POLICY.max_drop_points, metavar="POINTS", help=f"top-1 budget (default {DEFAULT_POLICY.max_drop_points:g})")
    p.add_argument("--min-cosine", type=float, default=DEFAULT_POLICY.min_cosine, metavar="C", help=f"cosine budget (default {DEFAULT_POLICY.min_cosine:g})")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per child process (default 900)")
    add_input_flags(p, bound=False)
    p.add_argument("--json", metavar="FILE", help="write the result as JSON")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=run, outputs=[("json", "--json", "file")],
                   inputs=[("file", "FILE"), ("model", "--model"), ("data", "--data")])


def run(args: argparse.Namespace) -> int:
    from mobilize.accuracy.verify import Policy
    from mobilize.arm64 import verify_file
    from mobilize.arm64.verdict import summary
    from mobilize.core.artifact import atomic_write_text
    from mobilize.core.checks import check_at_least, check_positive

    from mobilize.core.artifact import Artifact

    Artifact.from_file(args.file)  # a missing or unknown file is said first, before what the arm64 root lacks
    check_at_least(args.samples, 1, "--samples")
    check_positive(args.timeout, "--timeout", " seconds")
    policy = Policy(max_drop_points=args.max_drop, min_cosine=args.min_cosine)
    if args.on != "arm64":
        return _on_device(args, policy)
    result = verify_file(args.file, model=args.model, data=args.data, samples=args.samples, kind=args.kind,
                         cpu=args.cpu or "cortex-a76", timeout_s=args.timeout, policy=policy,
                         input_specs=input_specs_from_args(args) or (), runtime=args.runtime)
    print(f"{args.file} ({result['format']}, {result['kind']}) on {result['samples']} samples, against "
          f"{result['against']}")
    print(summary("verdict", result))
    print(f"  host:  {result['host_verdict']['reason']}")
    print(f"  arm64: {result['verdict']['reason']}")
    versions = ", ".join(f"{k} {v}" for k, v in result["versions"].items())
    print(f"  arm64 ran on {result['machine']} (QEMU {result['qemu_cpu']}, emulated: outputs are the target's "
          f"kernels', the {result['wall_s_not_latency']:.1f} s it took is not latency); {versions}")
    if args.json:
        atomic_write_text(args.json, dumps_measured(result, indent=2) + "\n")
    return 0


def _on_device(args: argparse.Namespace, policy) -> int:
    """``--on`` an SSH device (or a devices-file name, or ``host``): :mod:`mobilize.devices.verify`."""
    from mobilize.cli.inputs import input_specs_from_args
    from mobilize.core.artifact import atomic_write_text
    from mobilize.core.errors import ConfigError
    from mobilize.devices.verify import result_lines, verify_on_device

    if args.cpu:
        raise ConfigError("--cpu picks the emulated CPU of --on arm64", hint="leave --cpu out")
    result = verify_on_device(args.file, args.on, model=args.model, data=args.data, samples=args.samples,
                              kind=args.kind, timeout_s=args.timeout, policy=policy,
                              input_specs=input_specs_from_args(args) or (), runtime=args.runtime)
    for line in result_lines(result):
        print(line)
    if args.json:
        atomic_write_text(args.json, dumps_measured(result, indent=2) + "\n")
    return 0
