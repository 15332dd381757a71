"""The one input-spec syntax every command takes: ``--input_dims``, ``--input_type`` and ``--input NAME=VALUE``.

    $ mobilize bench vad.py:Vad --input_dims "1,32;()" --input_type "float;float" --input sr=16000
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_input_flags(p: argparse.ArgumentParser, *, memory_format: bool = False, bound: bool = True) -> None:
    from mobilize.cli.bench import _flag

    _flag(p, "input_dims", help='input shapes, one per tensor input: "1,3,224,224", "1,128;1,128", "1,512;()" '
                                '(() is a scalar)')
    _flag(p, "input_type", help='input types, one per input: "float", "int64;int64", "float;bool" '
                                '(float, int64, int32, uint8, bool, ...)')
    if memory_format:
        _flag(p, "input_memory_format", choices=["contiguous_format", "channels_last"])
    if bound:
        p.add_argument("--input", action="append", default=[], metavar="NAME=VALUE", dest="bound_input",
                       help="a non-tensor forward argument, bound by name (repeatable), e.g. --input sr=16000; "
                            "recorded in every manifest")


def add_task_flags(p: argparse.ArgumentParser, *, metric: bool = True) -> None:
    """``--task`` and ``--metric``: which measure the accuracy budget is judged on."""
    from mobilize.accuracy.tasks import Task

    p.add_argument("--task", choices=[str(t) for t in Task], default=None,
                   help="the model's task, which decides the accuracy measure: classification (top-1), embedding "
                        "(cosine, neighbour recall), detection (boxes matched at IoU 0.5), segmentation (mask IoU), "
                        "sequence (CTC greedy decode), raw (SQNR/cosine), generation (a causal LM: decoder files with "
                        "a KV cache, timed in tokens, judged by perplexity and token agreement) (default: guessed "
                        "from the outputs, and said)")
    if not metric:
        return
    p.add_argument("--metric", metavar="FILE.py:FUNCTION", default=None,
                   help="your own measure: FUNCTION(outputs, reference_outputs, labels) -> float, higher is better, "
                        "judged by --max-drop in its units")


def task_from_args(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(--task, --metric), the metric's file and function checked before any work."""
    from mobilize.accuracy.tasks import load_metric

    if args.metric:
        from mobilize.accuracy.tasks import metric_timeout_s

        load_metric(args.metric)
        limit, why = metric_timeout_s(), "a metric's own limit; MOBILIZE_METRIC_TIMEOUT_S sets it"
        if getattr(args, "timeout", None) is not None and args.timeout < limit:  # the stage's ends it first
            limit, why = args.timeout, "--timeout, the limit of the stage it runs in"
        print(f"mobilize: note: --metric {args.metric} is your own code: it runs with your permissions (as a "
              f"trusted pickle would), in an isolated child, under a {limit:g} s limit ({why})", file=sys.stderr)
    return args.task, args.metric


def input_specs_from_args(args: argparse.Namespace) -> list | None:
    """The specs ``--input_dims`` / ``--input_type`` give, or None when the model's own are to be used."""
    from mobilize.core.errors import ConfigError
    from mobilize.core.inputs import parse_input_specs

    if getattr(args, "input_type", None) and not args.input_dims:
        raise ConfigError("--input_type needs --input_dims", hint='e.g. --input_dims "1,128;1,128" --input_type '
                                                                  '"int64;int64"')
    if args.input_dims is None:
        return None
    return parse_input_specs(args.input_dims, getattr(args, "input_type", None),
                             getattr(args, "input_memory_format", None))


def bound_args_from_args(args: argparse.Namespace) -> dict[str, Any]:
    from mobilize.core.inputs import parse_bound_args

    return parse_bound_args(getattr(args, "bound_input", None))
