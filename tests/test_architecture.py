"""The layering DESIGN.md promises, checked on the source: runtimes never import exporters, the
stage packages form no import cycle, one function runs passes and exporters, and verdict
thresholds live only in the verify policy."""

from __future__ import annotations

import ast
from pathlib import Path

import mobilize

SRC = Path(mobilize.__file__).parent
STAGES = ("sources", "formats", "passes", "exporters", "runtimes", "accuracy", "bench")


def imports(path: Path) -> set[str]:
    """Every mobilize module a file imports, at top level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mobilize"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("mobilize"))
    return found


def package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else None


def stage_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {s: set() for s in STAGES}
    for stage in STAGES:
        for path in (SRC / stage).rglob("*.py"):
            for mod in imports(path):
                target = package_of(mod)
                if target and target != stage:
                    graph[stage].add(target)
    return graph


def test_runtimes_and_formats_never_import_exporters_or_passes():
    graph = stage_graph()
    assert "exporters" not in graph["runtimes"] and "passes" not in graph["runtimes"]
    assert not graph["formats"] & {"exporters", "runtimes", "passes"}


def test_stage_packages_have_no_import_cycle():
    graph = stage_graph()

    def reaches(a: str, b: str, seen=()) -> bool:
        return any(n == b or (n not in seen and reaches(n, b, (*seen, n))) for n in graph[a])

    cycles = [s for s in STAGES if reaches(s, s)]
    assert not cycles, {s: sorted(graph[s]) for s in cycles}


def test_one_function_runs_passes_and_exporters():
    """Only build.py instantiates passes and exporters from their registries and runs them
    (``PASSES.get(name)(config)(...)``, ``EXPORTERS.get(name)(config).export(...)``)."""
    runners = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Call)
                    and isinstance(node.func.func, ast.Attribute) and node.func.func.attr == "get"
                    and isinstance(node.func.func.value, ast.Name) and node.func.func.value.id in ("PASSES", "EXPORTERS")):
                runners.add(str(path.relative_to(SRC)))
    assert runners == {"build.py"}, runners


def test_verdict_thresholds_live_only_in_the_policy():
    """No comparison of an accuracy metric with a numeric literal outside accuracy/verify.py."""
    metrics = ("cosine", "sqnr", "agreement", "top1", "max_abs", "drop")
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.relative_to(SRC).as_posix() in ("accuracy/verify.py",):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            names = " ".join(ast.unparse(s) for s in sides if not isinstance(s, ast.Constant))
            literal = any(isinstance(s, ast.Constant) and isinstance(s.value, float) and s.value not in (0.0, 1.0)
                          for s in sides)
            if literal and any(m in names for m in metrics):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}: {ast.unparse(node)}")
    assert not offenders, offenders
