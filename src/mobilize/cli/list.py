"""``mobilize list [zoo|recipes|plans|runtimes|passes|exporters|targets|schema] [--json FILE|-]``: what is built in - the
classifier recipes and the decoder ones (each engine's generative files, their ``NAME@gN`` int4 groups), every plan
(``generation`` among them), and every runtime with whether it can run here and, where not, the one command that
installs it.

    $ mobilize list plans
    default   eager steps, TorchScript, eager int8 (x86, qnnpack), ExecuTorch and ONNX Runtime fp32/int8
    quick     eager fp32, fused, TorchScript frozen
"""

from __future__ import annotations

import argparse

KINDS = ("zoo", "recipes", "plans", "runtimes", "passes", "exporters", "targets", "schema")


def add_parser(sub) -> None:
    p = sub.add_parser("list", help="list zoo models, recipes, plans, runtimes, passes, exporters or targets, or "
                                    "print report.json's schema",
                       description="List what mobilize has built in (everything, or one kind); `list schema` prints "
                                   "report.json's JSON Schema, filled (every enum written out), for any validator.")
    p.add_argument("kind", nargs="?", choices=KINDS, help="what to list (default: everything)")
    p.add_argument("--json", metavar="FILE", help="write the listing as JSON to FILE (- for standard output), for "
                                                 "scripts: each kind a list of {name, description}")
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

        return [(n, load_recipe(n).description) for n in builtin_recipe_names()] + _decoder_recipes()
    if kind == "plans":
        from mobilize.plans.plan import builtin_plan_names, load_plan

        from mobilize.generation.plan import LARGE_PARAMETERS, LARGE_PLAN

        return [(n, load_plan(n).description) for n in builtin_plan_names()] + [(
            "generation", "every engine's decoder files for a causal LM (compare --task generation; the recipes "
                          "marked [decoder]), the eager float model first"), (
            "generation-large", f"compare's default for a causal LM of {LARGE_PARAMETERS // 1_000_000}M parameters "
                                f"or more: {', '.join(LARGE_PLAN)} (--plan generation: every file)")]
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
            text = _doc(registry.get(name))
            if kind == "runtimes":
                text = f"{text} [{_runtime_here(registry.get(name))}]"
            out.append((name, text))
        except ImportError as exc:  # an optional backend whose package is missing: say so, keep listing
            out.append((name, f"unavailable: {exc}"))
    return out + (_decoder_runtimes() if kind == "runtimes" else [])


def _runtime_here(cls) -> str:
    from mobilize.core.packages import install_hint, missing

    gone = missing(getattr(cls, "packages", ()))
    return f"not installed here: {install_hint(gone)}" if gone else "available here"


def _decoder_recipes() -> list[tuple[str, str]]:
    """Each engine's decoder variants (``Backend.decoders``), as ``--variant`` and ``optimize --recipe`` take them."""
    from mobilize.generation.plan import generation_variants

    rows = []
    for v in generation_variants():
        groups = f"; int4 groups {', '.join(f'{v.name}@g{g}' for g in v.groups)}" if v.groups else ""
        rows.append((v.name, f"[decoder] {v.engine}, {v.weights} weights: {v.how}{groups}"))
    return rows


def _decoder_runtimes() -> list[tuple[str, str]]:
    """The engines that run decoder files, each once, with whether its variants can run here (a decoder-only engine
    such as llama.cpp has no tensor runtime in the registry above)."""
    from mobilize.core.backend import BACKENDS
    from mobilize.generation.plan import generation_variants, unavailable

    engines: dict[str, list] = {}
    for v in generation_variants():
        engines.setdefault(v.engine, []).append(v)
    rows = []
    for engine, variants in engines.items():
        uses = dict.fromkeys((*BACKENDS.get(engine).packages, *(p for v in variants for p in v.packages)))
        why = {v.name: unavailable(v) for v in variants}
        ready = [n for n, w in why.items() if w is None]
        if len(ready) == len(variants):
            here = "available here"
        else:
            missing = "; ".join(f"{n}: {w}" for n, w in why.items() if w)
            here = (f"{len(ready)} of {len(variants)} available here; " if ready else "not available here: ") + missing
        rows.append((f"{engine} (decoders)", f"{', '.join(why)}; imports {', '.join(uses)} [{here}]"))
    return rows


def _doc(obj) -> str:
    doc = (getattr(obj, "__doc__", None) or "").strip()
    if not doc or doc.startswith(type(obj).__name__ + "("):
        module = __import__(obj.__module__, fromlist=["_"]) if hasattr(obj, "__module__") else None
        doc = (getattr(module, "__doc__", None) or "").strip()
    return doc.splitlines()[0].replace("``", "") if doc else ""


def run(args: argparse.Namespace) -> int:
    if args.kind == "schema":
        return _schema(args.json)
    if args.json:
        import json
        import sys

        from mobilize.core.artifact import atomic_write_text

        listing = {kind: [{"name": n, "description": t} for n, t in entries(kind)]
                   for kind in ([args.kind] if args.kind else KINDS) if kind != "schema"}
        text = json.dumps(listing, indent=2) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
        else:
            atomic_write_text(args.json, text)
            print(f"wrote {args.json}", file=sys.stderr)
        return 0
    for kind in [args.kind] if args.kind else KINDS:
        if kind == "schema":
            print("schema:\n  report.json's JSON Schema (draft 2020-12): mobilize list schema [--json FILE]")
            continue
        if not args.kind:
            print(f"{kind}:")
        rows = entries(kind)
        width = max((len(n) for n, _ in rows), default=0)
        for name, text in rows:
            print(f"{'  ' if not args.kind else ''}{name:<{width}}  {text}")
    return 0


def _schema(json_file: str | None) -> int:
    """report.json's JSON Schema as ``json_report.schema()`` fills it (schema.json's ``["$Outcome"]`` placeholders
    written out, every variant field from the dataclasses that write it): on standard output, or written to
    ``json_file`` (#65 item 4: the packaged schema.json alone is not the schema a validator needs)."""
    import json
    import sys

    from mobilize.core.artifact import atomic_write_text
    from mobilize.report.json_report import schema

    text = json.dumps(schema(), indent=2) + "\n"
    if json_file and json_file != "-":
        atomic_write_text(json_file, text)
        print(f"wrote {json_file}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
