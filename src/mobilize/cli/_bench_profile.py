"""``mobilize bench FILE --profile``: after the benchmark, the time-weighted per-op table of the same file,
on the same input and thread count (ETDump for ``.pte``/``.bpte``, ONNX Runtime's profiler for ``.onnx``).

    $ mobilize bench pool.pte --threads 1 --profile
    ...statistics block...
    time profile of pool.pte (ETDump, 1 thread(s), median of 20 runs): 24.415 ms per run; inside XNNPACK 0.143 ms (0.6%), outside 24.272 ms (99.4%), runtime between ops 0.001 ms (0.0%)
      op                                 where                  count    ms/run  share
      aten.avg_pool2d                    portable                   1    24.272  99.4%
      XNNPACK delegate call              XNNPACK                    2     0.143   0.6%
    ...
    WARNING: 1 op outside XNNPACK takes 99% of the measured time: aten.avg_pool2d 99% (instruction 1); by op count XNNPACK runs 7 of 8 (88%), so the op count alone does not show it. ...
"""

from __future__ import annotations

import argparse
from typing import Any


def check(reference: str | None) -> None:
    """Refuse ``--profile`` on something without a per-op profiler before the benchmark runs."""
    from mobilize.profile import check_profilable

    check_profilable(reference or "")


def add_profile(report: dict[str, Any], reference: str, args: argparse.Namespace) -> list[str]:
    """Profile ``reference`` on the inputs ``bench`` chose; store ``report["time_profile"]``; return the table."""
    from mobilize.api import _choose_inputs
    from mobilize.profile import profile_file
    from mobilize.runtimes.base import open_session
    from mobilize.core.inputs import parse_input_specs
    from mobilize.sources.models import resolve_model

    specs = parse_input_specs(args.input_dims, args.input_type, args.input_memory_format) if args.input_dims else None
    target = resolve_model(reference)
    with open_session(target, args.runtime, 1) as session:
        inputs, _, _ = _choose_inputs(session, target, specs, args.no_inputs, args.use_bundled_input, args.data,
                                      args.seed)
    profile = profile_file(reference, inputs, threads=report["threads"])
    report["time_profile"] = profile.to_json()
    return profile.lines()
