"""The layering ../shared/DESIGN.md writes down, checked on the source of every module (every import form,
lazy ones and ``importlib.import_module("mobilize...")`` strings included):

* a backend imports core, sources, passes, lowering and the measure packages only, never another backend
  or an orchestrator; nothing outside a backend imports its modules (they are reached through BACKENDS);
* no module below the CLI imports ``mobilize.api``; core imports nothing above it;
* one function runs passes and exporters; verdict thresholds live only in the verify policy;
* ``except Exception`` / ``except BaseException`` / bare ``except:`` only in the one translation helper
  (``errors.third_party_failure``, where the bug-or-user-error decision is made), the CLI's last resort and
  the two process boundaries; a handler that cleans up and re-raises unconditionally catches nothing.

Each rule is a function over a ``{module: source}`` map, so the tests below also plant a violation in a
copy of the real sources and check that the rule catches it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mobilize

SRC = Path(mobilize.__file__).parent

CORE = {"errors", "registry", "config", "recipe", "artifact", "context", "outcome", "target", "paths", "checks",
        "completeness", "runtime_options", "noise"}
"""Top-level modules that form the core (``mobilize/<name>.py``)."""
FACE = {"mobilize", "mobilize.__main__"}
"""The package's public face (re-exports the API) and ``python -m mobilize``: above everything, like the CLI."""
REGISTRIES = {"mobilize.exporters", "mobilize.passes", "mobilize.runtimes", "mobilize.backends", "mobilize.zoo"}
"""Packages whose ``__init__`` holds only a registry (lookups): core may ask them by name (a recipe builds each
step's config class from its registry)."""
MEASURE = {"accuracy", "bench", "lint", "profile", "report"}
ORCHESTRATORS = {"compare", "tune", "sweep", "plan", "api", "cli", "build", "isolate", "process", "native",
                 "camera"}
SHARED_FOR_BACKENDS = {"mobilize.backends", "mobilize.core.backend", "mobilize.exporters", "mobilize.exporters.base",
                       "mobilize.runtimes", "mobilize.runtimes.base", "mobilize.runtimes.torch_session",
                       "mobilize.runtimes.native_stderr"}
"""What every backend may use: the registry views and the base classes (public, shared by all engines)."""


def sources() -> dict[str, str]:
    """``mobilize.x.y`` -> source, for every module of the package."""
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(["mobilize", *parts])] = path.read_text()
    return out


def imports(module: str, source: str) -> set[str]:
    """Every mobilize module ``module`` imports: ``import``, ``from ... import`` (names that are modules too),
    relative imports, and string arguments of ``importlib.import_module`` / ``__import__``."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if _is_package(module) else 0)]
                base = ".".join(anchor + ([base] if base else []))
            if base.startswith("mobilize"):
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("mobilize"))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str) and node.args[0].value.startswith("mobilize")
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__")))):
            found.add(node.args[0].value)
    return found


def _is_package(module: str) -> bool:
    return (SRC.joinpath(*module.split(".")[1:]) / "__init__.py").exists()


def _known(name: str, modules: dict[str, str]) -> str | None:
    """The longest prefix of ``name`` that is a module (``from a import b`` adds ``a.b``, which may be a function)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def layer(module: str) -> str:
    parts = module.split(".")
    if module in FACE:
        return "face"
    if parts[1] == "backends":
        return f"backend:{parts[2]}" if len(parts) > 2 and parts[2] != "base" else "backends"
    if parts[1] in CORE:
        return "core"
    if parts[1] in MEASURE:
        return "measure"
    if parts[1] in ORCHESTRATORS:
        return "orchestrator"
    return parts[1]  # sources, passes, lowering, exporters, runtimes, zoo


def violations(modules: dict[str, str]) -> list[str]:
    """Every import that breaks a layer rule, as ``importer -> imported: rule``."""
    out = []
    for module, source in modules.items():
        mine = layer(module)
        for target in sorted(imports(module, source)):
            target = _known(target, modules)
            if target is None or target in (module, "mobilize"):  # the root package: its path or version
                continue
            theirs = layer(target)
            if theirs.startswith("backend:") and theirs != mine:
                out.append(f"{module} -> {target}: only {theirs[8:]}'s own modules import its modules "
                           f"(others reach it through BACKENDS)")
            if mine.startswith("backend:"):
                if theirs == "orchestrator":
                    out.append(f"{module} -> {target}: a backend never imports an orchestrator")
                if theirs in ("exporters", "runtimes") and target not in SHARED_FOR_BACKENDS:
                    out.append(f"{module} -> {target}: a backend uses only the shared bases of exporters/runtimes")
            if target == "mobilize.api" and not (module.startswith("mobilize.cli") or mine == "face"):
                out.append(f"{module} -> {target}: only the CLI (and the package's public face) imports api")
            if mine == "core" and theirs not in ("core", "sources") and target not in REGISTRIES:
                out.append(f"{module} -> {target}: core imports nothing above it")
    return out


def test_every_module_keeps_the_layer_rules():
    assert not violations(sources())


@pytest.mark.parametrize("planted_in,line,rule", [
    ("mobilize.lint.core", "from mobilize.backends.executorch.delegation import delegation_report\n",
     "only executorch's own modules"),
    ("mobilize.lint.core", "import importlib\nimportlib.import_module('mobilize.backends.onnxruntime.runtime')\n",
     "only onnxruntime's own modules"),
    ("mobilize.backends.litert.exporter", "from mobilize.backends.executorch import quant\n",
     "only executorch's own modules"),
    ("mobilize.backends.onnxruntime.runtime", "def f():\n    from mobilize.tune import tune\n",
     "never imports an orchestrator"),
    ("mobilize.sweep.runner", "from mobilize.api import bench\n", "only the CLI"),
    ("mobilize.core.artifact", "def f():\n    from mobilize.compare.runner import run_plan\n", "core imports nothing above"),
])
def test_a_planted_violation_is_caught(planted_in, line, rule):
    modules = sources()
    modules[planted_in] = modules[planted_in] + "\n" + line
    assert any(rule in v for v in violations(modules)), violations(modules)


def runners(modules: dict[str, str]) -> set[str]:
    """Modules that instantiate passes or exporters from their registries and run them."""
    found = set()
    for module, source in modules.items():
        for node in ast.walk(ast.parse(source)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Call)
                    and isinstance(node.func.func, ast.Attribute) and node.func.func.attr == "get"
                    and isinstance(node.func.func.value, ast.Name) and node.func.func.value.id in ("PASSES", "EXPORTERS")):
                found.add(module)
    return found


def test_one_function_runs_passes_and_exporters():
    """Only build.py instantiates passes and exporters from their registries and runs them
    (``PASSES.get(name)(config)(...)``, ``EXPORTERS.get(name)(config).export(...)``)."""
    assert runners(sources()) == {"mobilize.pipeline.build"}
    planted = {**sources(), "mobilize.tune": sources()["mobilize.tune"] + "\nEXPORTERS.get('onnx')(None).export(m, c, s)\n"}
    assert runners(planted) == {"mobilize.pipeline.build", "mobilize.tune"}


METRICS = ("cosine", "sqnr", "agreement", "top1", "max_abs", "drop", "within")


def threshold_offenders(modules: dict[str, str]) -> list[str]:
    """Comparisons of an accuracy metric with a numeric literal (int or float; 0 and 1 are not thresholds)
    outside accuracy/verify.py."""
    out = []
    for module, source in modules.items():
        if module == "mobilize.accuracy.verify":
            continue
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            names = " ".join(ast.unparse(s) for s in sides if not isinstance(s, ast.Constant)).lower()
            literal = any(isinstance(s, ast.Constant) and isinstance(s.value, (int, float))
                          and not isinstance(s.value, bool) and s.value not in (0, 1) for s in sides)
            if literal and any(m in names for m in METRICS):
                out.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_verdict_thresholds_live_only_in_the_policy():
    assert not threshold_offenders(sources())
    planted = {**sources(), "mobilize.compare.runner": sources()["mobilize.compare.runner"]
               + "\nif result.sqnr_db < 30:\n    pass\n"}
    assert threshold_offenders(planted) == ["mobilize.compare.runner:%d: result.sqnr_db < 30"
                                            % (planted["mobilize.compare.runner"].count("\n") - 1)]



ASSEMBLY = ("judge_budget", "judge_task", "against_both")
"""The halves of a quality verdict; ``verify.assess`` puts them together, and nothing else may."""


def assemblers(modules: dict[str, str]) -> list[str]:
    """Calls of a budget half outside accuracy/verify.py (a second place that assembles the budget)."""
    out = []
    for module, source in modules.items():
        if module == "mobilize.accuracy.verify":
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func).rpartition(".")[2]
                if name in ASSEMBLY:
                    out.append(f"{module}:{node.lineno}: {name}")
    return out


def test_one_function_assembles_the_budget():
    """compare, tune, optimize's verify and the arm64 check all judge through ``verify.assess``."""
    assert not assemblers(sources())
    planted = {**sources(), "mobilize.tune": sources()["mobilize.tune"]
               + "\nv = judge_budget(v, cosine=c, labelled=False)\n"}
    assert assemblers(planted) == ["mobilize.tune:%d: judge_budget" % planted["mobilize.tune"].count("\n")]

def test_seven_engines_one_folder_each():
    from mobilize.backends import BACKENDS

    folders = sorted(p.name for p in (SRC / "backends").iterdir() if (p / "__init__.py").exists())
    assert folders == sorted(BACKENDS.names()) == ["eager", "executorch", "litert", "nnapi", "onnxruntime",
                                                    "openvino", "torchscript"]


BROAD_CATCHES = {("mobilize.core.errors", "third_party_failure"): "the one translation helper (bug or user error)",
                 ("mobilize.cli.main", "_dispatch"): "the CLI's last resort (a bug: exit 1)",
                 ("mobilize.pipeline.isolate", "_child_main"): "the isolation boundary (sent to the parent)",
                 ("mobilize.compare.worker", "main"): "compare's worker process boundary (sent to the parent)",
                 ("mobilize.compare.host", "_answer"): "the shared timing host's boundary for each variant it holds "
                                                       "(sent to the parent; its other variants go on)"}
"""Where a handler may catch ``Exception`` or ``BaseException`` broadly: (module, function) -> why."""


def _broad(handler: ast.ExceptHandler) -> bool:
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(t is None or (isinstance(t, ast.Name) and t.id in ("Exception", "BaseException")) for t in types)


def _reraises(handler: ast.ExceptHandler) -> bool:
    """Clean up, then ``raise`` the same exception: nothing is caught (no return, break or continue before it)."""
    last = handler.body[-1]
    escapes = any(isinstance(n, (ast.Return, ast.Break, ast.Continue)) for n in ast.walk(handler))
    return isinstance(last, ast.Raise) and last.exc is None and not escapes


def broad_catches(modules: dict[str, str]) -> list[str]:
    """``module:line (function)`` for every handler that catches Exception, BaseException or everything,
    outside BROAD_CATCHES."""
    out = []
    for module, source in modules.items():
        tree = ast.parse(source)
        functions = {id(h): f.name for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                     for h in ast.walk(f) if isinstance(h, ast.ExceptHandler)}  # the innermost function wins
        for node in ast.walk(tree):
            if isinstance(node, ast.ExceptHandler) and _broad(node) and not _reraises(node):
                where = functions.get(id(node), "<module>")
                if (module, where) not in BROAD_CATCHES:
                    caught = ast.unparse(node.type) if node.type else ""
                    out.append(f"{module}:{node.lineno} ({where}): except {caught}".rstrip())
    return out


def test_only_the_translation_helper_and_the_boundaries_catch_everything():
    assert not broad_catches(sources())


@pytest.mark.parametrize("handler", ["except Exception:", "except BaseException as exc:", "except:",
                                     "except (ValueError, Exception) as exc:"])
def test_a_planted_broad_catch_is_caught(handler):
    planted = {**sources(), "mobilize.lint.core": sources()["mobilize.lint.core"]
               + f"\ndef f():\n    try:\n        g()\n    {handler}\n        return None\n"}
    lines = planted["mobilize.lint.core"].count("\n")
    assert broad_catches(planted) == [f"mobilize.lint.core:{lines - 1} (f): {handler.split(' as ')[0].rstrip(':')}"]
    reraised = {**sources(), "mobilize.lint.core": sources()["mobilize.lint.core"]
                + f"\ndef f():\n    try:\n        g()\n    {handler}\n        cleanup()\n        raise\n"}
    assert not broad_catches(reraised)
