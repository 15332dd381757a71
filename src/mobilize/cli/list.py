"""``mobilize list [zoo|recipes|plans|runtimes|passes|exporters|targets]``: what is built in.

    $ mobilize list plans
    default   eager steps, TorchScript, eager int8 (x86, qnnpack), ExecuTorch and ONNX Runtime fp32/int8
    quick     eager fp32, fused, TorchScript frozen
"""

from __future__ import annotations

import argparse

KINDS = ("zoo", "recipes", "plans", "runtimes", "passes", "exporters", "targets")


def add_parser(sub) -> None:
    p = sub.add_parser("list", help="list zoo models, recipes, plans, runtimes, passes, exporters or targets",
                       description="List what mobilize has built in (everything, or one kind).")
    p.add_argument("kind", nargs="?", choices=KINDS, help="what to list (default: everything)")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=run)


def entries(kind: str) -> list[tuple[str, str]]:
    """(name, one-line description) for one kind, from its registry or built-in folder."""
    if kind == "zoo":
        from mobilize.zoo import DEFAULT_MODEL, ZOO

        return [(f"zoo:{n}", (ZOO.get(n).description or _doc(ZOO.get(n)))
                 + f" [input {', '.join(str(s) for s in ZOO.get(n).input_specs)}]"
                 + (" (the default model)" if n == DEFAULT_MODEL and "default model" not in ZOO.get(n).description
                    else "")) for n in ZOO.names()]
    if kind == "recipes":
        from mobilize.pipeline.recipe import builtin_recipe_names, load_recipe

        return [(n, load_recipe(n).description) for n in builtin_recipe_names()]
    if kind == "plans":
        from mobilize.plans.plan import builtin_plan_names, load_plan

        return [(n, load_plan(n).description) for n in builtin_plan_names()]
    if kind == "targets":
        from mobilize.core.target import TARGETS, Target

        return [(n, Target.parse(n).describe()) for n in TARGETS]
    from mobilize.exporters import EXPORTERS
    from mobilize.passes import PASSES
    from mobilize.runtimes import RUNTIMES

    registry = {"runtimes": RUNTIMES, "passes": PASSES, "exporters": EXPORTERS}[kind]
    out = []
    for name in registry.names():
        try:
            out.append((name, _doc(registry.get(name))))
        except ImportError as exc:  # an optional backend whose package is missing: say so, keep listing
            out.append((name, f"unavailable: {exc}"))
    return out


def _doc(obj) -> str:
    doc = (getattr(obj, "__doc__", None) or "").strip()
    if not doc or doc.startswith(type(obj).__name__ + "("):
        module = __import__(obj.__module__, fromlist=["_"]) if hasattr(obj, "__module__") else None
        doc = (getattr(module, "__doc__", None) or "").strip()
    return doc.splitlines()[0].replace("``", "") if doc else ""


def run(args: argparse.Namespace) -> int:
    for kind in [args.kind] if args.kind else KINDS:
        if not args.kind:
            print(f"{kind}:")
        rows = entries(kind)
        width = max((len(n) for n, _ in rows), default=0)
        for name, text in rows:
            print(f"{'  ' if not args.kind else ''}{name:<{width}}  {text}")
    return 0
