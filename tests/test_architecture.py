"""The map of the parts (``src/mobilize/architecture.toml``, written once) checked on the source of every module
(every import form, lazy ones and ``importlib.import_module("mobilize...")`` strings included):

* layers: a part imports its own layer and the layers below, never above; every module is on the map; a part may
  be a module inside a package (``lint.support``: the lint types an engine fills in, apart from lint's machinery);
* forbidden imports the layers would allow but the design does not (passes and report never reach a runtime);
* engines: nothing outside an engine's folder imports its modules (they are reached through the descriptor),
  an engine never imports another, nor reaches another through the registries by name;
* ``import_module`` of a computed name only where :data:`DYNAMIC_IMPORTS` says why (the check cannot follow it);
* only the face (cli, the package root) imports ``mobilize.api``;
* cycles between parts only where the map lists them, with the reason;
* no engine name or engine package name compared or branched on outside ``backends/`` (ask the descriptor).

Each rule is a function over a ``{module: source}`` map, so the tests below also plant a violation in a
copy of the real sources and check that the rule catches it.  The rules over function and file sizes, broad
catches, thresholds and the single package/SQNR checks are in ``test_architecture_rules.py``; the planted engine
folder in ``test_architecture_engine.py``.
"""

from __future__ import annotations

import ast
import functools
import tomllib
from pathlib import Path

import pytest

import mobilize

SRC = Path(mobilize.__file__).parent


def load_map(src: Path = SRC) -> dict:
    return tomllib.loads((src / "architecture.toml").read_text())


MAP = load_map()


def sources(src: Path = SRC) -> dict[str, str]:
    """``mobilize.x.y`` -> source, for every module of the package (a fresh dict: tests plant lines in it)."""
    return dict(_read_sources(src))


@functools.cache
def _read_sources(src: Path) -> dict[str, str]:
    out = {}
    for path in src.rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(["mobilize", *parts])] = path.read_text()
    return out


@functools.lru_cache(maxsize=2048)
def parse(source: str) -> ast.Module:
    """``ast.parse``, once per distinct source: the rules parse every module of the package, and each planted test
    parses them again (the architecture tests took 90 s of the suite's worker time); the trees are only read."""
    return ast.parse(source)


def _import_call(node: ast.AST) -> bool:
    """``importlib.import_module(...)``, ``import_module(...)`` or ``__import__(...)`` with an argument."""
    return (isinstance(node, ast.Call) and bool(node.args)
            and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                 or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__"))))


def imports(module: str, source: str, modules: dict[str, str]) -> set[str]:
    """Every mobilize module ``module`` imports: ``import``, ``from ... import`` (names that are modules too),
    relative imports, and string arguments of ``importlib.import_module`` / ``__import__``."""
    found = set()
    package = f"{module}.__init__" if any(m.startswith(module + ".") for m in modules) else module
    for level, base, names in _import_statements(source):
        if level:
            anchor = package.split(".")[: len(package.split(".")) - level]
            base = ".".join(anchor + ([base] if base else []))
        if base.startswith("mobilize"):
            found.add(base)
            found.update(f"{base}.{name}" for name in names)
    return found


@functools.lru_cache(maxsize=2048)
def _import_statements(source: str) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    """(level, module, names) of each ``from`` import of ``source``; (0, name, ()) of each ``import`` and each literal
    ``import_module``/``__import__`` argument."""
    found = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or "", tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            found.extend((0, a.name, ()) for a in node.names)
        elif _import_call(node) and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            found.append((0, node.args[0].value, ()))
    return tuple(found)


def _known(name: str, modules: dict[str, str]) -> str | None:
    """The longest prefix of ``name`` that is a module (``from a import b`` adds ``a.b``, which may be a function)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _engines(modules: dict[str, str]) -> set[str]:
    """Engine folders: the packages directly under ``mobilize.backends`` (modules beside them are shared code)."""
    return {m.split(".")[2] for m in modules if m.startswith("mobilize.backends.") and m.count(".") == 2
            and any(k.startswith(m + ".") for k in modules)}


def _listed(the_map: dict) -> set[str]:
    return {p for layer in the_map["layers"] for p in layer["parts"]}


def part(module: str, engines: set[str], the_map: dict = MAP) -> str:
    """``compare``, ``lint.support``, ``api``, ``backend:executorch`` or ``mobilize`` (the package root): the longest
    name the map lists that contains the module, else its top-level package."""
    bits = module.split(".")
    if len(bits) == 1:
        return "mobilize"
    if bits[1] == "backends" and len(bits) > 2 and bits[2] in engines:
        return f"backend:{bits[2]}"
    listed = _listed(the_map)
    return next((".".join(bits[1:i]) for i in range(len(bits), 2, -1) if ".".join(bits[1:i]) in listed), bits[1])


def rank(the_part: str, layers: list[dict]) -> int | None:
    key = "backend:*" if the_part.startswith("backend:") else the_part
    return next((i for i, layer in enumerate(layers) if key in layer["parts"]), None)


def _forbidden(mine: str, theirs: str, the_map: dict) -> str | None:
    """The reason the map forbids ``mine`` to import ``theirs``, if it does."""
    def matches(name: str, patterns: list[str]) -> bool:
        return name in patterns or (name.startswith("backend:") and "backend:*" in patterns)

    return next((rule["why"] for rule in the_map.get("forbidden", [])
                 if matches(mine, rule["parts"]) and matches(theirs, rule["imports"])), None)


def violations(modules: dict[str, str], the_map: dict = MAP) -> list[str]:
    """Every import that breaks a rule of the map, and every module the map does not place."""
    layers, rules, engines = the_map["layers"], the_map["rules"], _engines(modules)
    face = next(i for i, layer in enumerate(layers) if layer["name"] == "face")
    out = []
    for module, source in sorted(modules.items()):
        mine = part(module, engines, the_map)
        my_rank = rank(mine, layers)
        if my_rank is None:
            out.append(f"{module}: part '{mine}' is not on the map (src/mobilize/architecture.toml)")
            continue
        for target in sorted(imports(module, source, modules)):
            target = _known(target, modules)
            if target is None or target in (module, "mobilize"):  # the root package: its path or version
                continue
            theirs = part(target, engines, the_map)
            their_rank = rank(theirs, layers)
            if theirs.startswith("backend:") and theirs != mine and rules["engine_modules_private"]:
                out.append(f"{module} -> {target}: only {theirs[8:]}'s own modules import its modules "
                           f"(others reach it through the descriptor)")
            elif their_rank is not None and their_rank > my_rank:
                out.append(f"{module} -> {target}: {mine} ({layers[my_rank]['name']}) imports {theirs} "
                           f"({layers[their_rank]['name']}), a layer above it")
            elif theirs != mine and _forbidden(mine, theirs, the_map):
                out.append(f"{module} -> {target}: {mine} never imports {theirs}: {_forbidden(mine, theirs, the_map)}")
            if theirs in rules["only_face_imports"] and my_rank != face:
                out.append(f"{module} -> {target}: only the face ({', '.join(layers[face]['parts'])}) imports {theirs}")
    return out


def part_cycles(modules: dict[str, str], the_map: dict = MAP) -> list[str]:
    """Groups of parts that import each other (strongly connected), other than the map's listed cycles."""
    engines = _engines(modules)
    graph: dict[str, set[str]] = {}
    for module, source in modules.items():
        mine = part(module, engines, the_map)
        for target in imports(module, source, modules):
            target = _known(target, modules)
            if target and target != "mobilize" and part(target, engines, the_map) != mine:
                graph.setdefault(mine, set()).add(part(target, engines, the_map))
    allowed = [set(c["parts"]) for c in the_map.get("cycles", [])]
    return sorted(" <-> ".join(sorted(g)) for g in _strongly_connected(graph) if len(g) > 1 and set(g) not in allowed)


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative enough for a few dozen parts."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == node:
                    break
            groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_every_module_keeps_the_layer_rules():
    assert not violations(sources())


def test_no_cycles_between_parts_but_the_listed_ones():
    assert not part_cycles(sources())


@pytest.mark.parametrize("planted_in,line,rule", [
    ("mobilize.lint.core", "from mobilize.backends.executorch.delegation import delegation_report\n",
     "only executorch's own modules"),
    ("mobilize.lint.core", "import importlib\nimportlib.import_module('mobilize.backends.onnxruntime.runtime')\n",
     "only onnxruntime's own modules"),
    ("mobilize.backends.litert.exporter", "from mobilize.backends.executorch import quant\n",
     "only executorch's own modules"),
    ("mobilize.backends.onnxruntime.runtime", "def f():\n    from mobilize.tune import tune\n",
     "engines) imports tune (orchestrators), a layer above"),
    ("mobilize.backends.onnxruntime.runtime", "from mobilize.pipeline.build import build\n",
     "engines) imports pipeline (pipeline), a layer above"),
    ("mobilize.backends.onnxruntime.lint_probe", "from mobilize.lint.core import run_checks\n",
     "engines) imports lint (measure), a layer above"),
    ("mobilize.backends.executorch.profiler", "from mobilize.profile.run import profile_file\n",
     "engines) imports profile (measure), a layer above"),
    ("mobilize.backends.nnapi.adb", "from mobilize.report.bench_report import BenchReport\n",
     "engines) imports report (measure), a layer above"),
    ("mobilize.lint.support", "from mobilize.lint.core import run_checks\n",
     "lint.support (measure types) imports lint (measure), a layer above"),
    ("mobilize.passes.fuse", "from mobilize.runtimes.base import open_session\n", "passes never imports runtimes"),
    ("mobilize.passes.fuse", "from mobilize.exporters import EXPORTERS\n", "passes never imports exporters"),
    ("mobilize.report.terminal", "from mobilize.runtimes.base import open_session\n", "report never imports runtimes"),
    ("mobilize.report.html", "from mobilize.backends import profiler_for\n", "report never imports backends"),
    ("mobilize.camera.frames", "from mobilize.native.build import runners\n",
     "camera (frames) imports native (native programs), a layer above"),
    ("mobilize.native.build", "def f():\n    from mobilize.arm64.run import run_children\n",
     "native (native programs) imports arm64 (arm64), a layer above"),
    ("mobilize.arm64.run", "from mobilize.compare.entry import compare\n",
     "arm64 (arm64) imports compare (orchestrators), a layer above"),
    ("mobilize.sweep.runner", "from mobilize.api import bench\n", "only the face"),
    ("mobilize.core.artifact", "def f():\n    from mobilize.compare.worker import main\n",
     "core (core) imports compare (orchestrators), a layer above"),
    ("mobilize.core.artifact", "from mobilize.backends import side_files\n",
     "core (core) imports backends (engine-shared), a layer above"),
    ("mobilize.core.context", "from mobilize.sources.data import open_data\n",
     "core (core) imports sources (sources), a layer above"),
    ("mobilize.sources.models", "from mobilize.plans.fit import layer_counts\n",
     "sources (sources) imports plans (plans), a layer above"),
    ("mobilize.lint.batchnorm", "from mobilize.pipeline.recipe import Recipe\n",
     "lint (measure) imports pipeline (pipeline), a layer above"),
    ("mobilize.accuracy.verify", "from mobilize.report.results import VariantResult\n",
     "accuracy (measure types) imports report (measure), a layer above"),
    ("mobilize.pipeline.build", "from .. import compare\n", "pipeline (pipeline) imports compare"),
])
def test_a_planted_violation_is_caught(planted_in, line, rule):
    modules = sources()
    assert not any(rule in v for v in violations(modules))
    modules[planted_in] = modules[planted_in] + "\n" + line
    assert any(rule in v for v in violations(modules)), violations(modules)


def test_a_module_off_the_map_is_caught():
    modules = {**sources(), "mobilize.helpers": "import os\n"}
    assert violations(modules) == ["mobilize.helpers: part 'helpers' is not on the map (src/mobilize/architecture.toml)"]


def test_a_planted_cycle_is_caught():
    modules = sources()
    modules["mobilize.tune.why"] += "\nfrom mobilize.compare import worker\n"
    modules["mobilize.compare.worker"] += "\nfrom mobilize.tune import why\n"
    assert part_cycles(modules) == ["compare <-> tune"]
    listed = {**MAP, "cycles": [*MAP["cycles"], {"parts": ["compare", "tune"], "why": "planted"}]}
    assert part_cycles(modules, listed) == []


DYNAMIC_IMPORTS = {
    ("mobilize", "__getattr__"): "PEP 562: the public names of the API, each a literal in _PUBLIC",
    ("mobilize.cli.main", "build_parser"): "the face imports its own subcommand modules (mobilize.cli.NAME)",
    ("mobilize.cli.list", "_doc"): "the module of a registered plugin, to show its docstring",
    ("mobilize.core.backend", "load"): "the descriptor's own entries, inside the engine's folder (the one way in)",
    ("mobilize.core.registry", "names"): "a registry's own package",
    ("mobilize.core.registry", "get"): "a registry's own plugins and its index's entries",
    ("mobilize.core.registry", "_external"): "a user's plugin named package.module:Name",
    ("mobilize.runtimes.base", "import_backend"): "the third-party packages a runtime declares",
    ("mobilize.sources.models", "_resolve_import"): "the user's own model module (pkg.mod:factory)",
    ("mobilize.backends.executorch.bpte", "read_test_cases"): "executorch's generated flatbuffer modules",
    ("mobilize.generation.footprint", "_child"): "the third-party runtime modules a decoder variant declares",
}
"""Where a module is imported by a computed name, which the layer check cannot follow: (module, function) -> why."""


@functools.lru_cache(maxsize=2048)
def _functions(tree: ast.AST) -> dict[int, str]:
    """id(node) -> the innermost function (or ``<module>``) each node of ``tree`` is in (once per tree of
    :func:`parse`; read only)."""
    out: dict[int, str] = {}
    for f in ast.walk(tree):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for n in ast.walk(f):
                out[id(n)] = f.name  # inner functions are walked later and win
    return out


def dynamic_imports(modules: dict[str, str]) -> list[str]:
    """``module:line (function)`` of every ``import_module``/``__import__`` of a non-literal name outside
    :data:`DYNAMIC_IMPORTS`."""
    out = []
    for module, source in sorted(modules.items()):
        tree = parse(source)
        where = _functions(tree)
        for node in ast.walk(tree):
            if _import_call(node) and not isinstance(node.args[0], ast.Constant):
                function = where.get(id(node), "<module>")
                if (module, function) not in DYNAMIC_IMPORTS:
                    out.append(f"{module}:{node.lineno} ({function}): {ast.unparse(node)}")
    return out


def test_modules_are_imported_by_computed_names_only_where_listed():
    assert not dynamic_imports(sources())
    assert all(any(m == module for m in sources()) for module, _ in DYNAMIC_IMPORTS), "a listed module is gone"


def test_a_planted_computed_import_is_caught():
    planted = {**sources(), "mobilize.lint.core": sources()["mobilize.lint.core"]
               + "\ndef f(name):\n    import importlib\n    return importlib.import_module(f'mobilize.backends.{name}')\n"}
    lines = planted["mobilize.lint.core"].count("\n")
    assert dynamic_imports(planted) == [f"mobilize.lint.core:{lines} (f): importlib.import_module(f'mobilize.backends.{{name}}')"]


def test_every_engine_folder_is_a_registered_backend():
    from mobilize.backends import BACKENDS

    folders = sorted(p.name for p in (SRC / "backends").iterdir() if (p / "__init__.py").exists())
    assert folders == sorted(BACKENDS.names()) == sorted(_engines(sources()))
    assert all(BACKENDS.get(name).name == name for name in folders)


BASE_PACKAGES = {"torch": "mobilize's own dependency (the eager reference), not one engine's",
                 "numpy": "mobilize's own dependency"}
"""Packages some engine declares that are not engine knowledge when a module names them."""
ENGINE_NAME_EXCLUDED = {
    ("mobilize.lowering.onnx_export", "torchscript"): "torch.onnx.export's TorchScript-based exporter (the onnx "
                                                      "exporter's `exporter` option), not the torchscript engine",
}
"""(module, name) -> why that module may compare that engine name."""


def engine_names() -> dict[str, str]:
    """Every name an engine owns -> the engine: its folder, formats, runtimes, exporters, lint targets and the
    packages it declares (``Backend.packages`` and its runtimes' and exporters' ``packages``), read from the registry."""
    from mobilize.backends import all_backends

    out: dict[str, str] = {}
    for b in all_backends():
        for name in (b.name, *b.formats, *b.formats.values(), *b.runtimes, *b.exporters, *b.lint_targets, *b.packages):
            out.setdefault(name, b.name)
        for field in ("runtimes", "exporters"):
            for entry in getattr(b, field).values():
                for package in getattr(b.load(entry), "packages", ()):
                    out.setdefault(package.split(".")[0], b.name)
    return {name: engine for name, engine in out.items() if name not in BASE_PACKAGES}


def _named(node: ast.AST, names: dict[str, str]) -> list[str]:
    """The engine names a comparison side, a case pattern or a dict key spells as a literal (or a literal tuple)."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str) and i.value in names]


def _branches(tree: ast.AST, names: dict[str, str]):
    """(node, names) of every comparison, match case and dict literal that spells an engine name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            found = [n for side in (node.left, *node.comparators) for n in _named(side, names)]
        elif isinstance(node, ast.match_case):
            found = [n for p in ast.walk(node.pattern) if isinstance(p, ast.MatchValue) for n in _named(p.value, names)]
        elif isinstance(node, ast.Dict):
            found = [n for key in node.keys if key is not None for n in _named(key, names)]
        else:
            continue
        if found:
            yield node, found


def engine_name_offenders(modules: dict[str, str], names: dict[str, str],
                          excluded: dict = ENGINE_NAME_EXCLUDED) -> list[str]:
    """``module:line: code (names)`` for every engine name compared, matched or used as a dict key outside
    ``backends/`` and ``excluded``."""
    out = []
    for module, source in sorted(modules.items()):
        if module == "mobilize.backends" or module.startswith("mobilize.backends."):
            continue
        for node, found in _branches(parse(source), names):
            found = [n for n in found if (module, n) not in excluded]
            if found:
                code = ast.unparse(node.pattern if isinstance(node, ast.match_case) else node).splitlines()[0]
                line = node.pattern.lineno if isinstance(node, ast.match_case) else node.lineno
                out.append(f"{module}:{line}: {code[:100]} ({', '.join(found)})")
    return out


LOOKUPS = {"BACKENDS.get", "RUNTIMES.get", "EXPORTERS.get", "tool", "open_session", "session_class", "runtime_for",
           "backend_for_format", "backend_for_runtime", "profiler_for", "checker_for", "why_slow_for", "drift_for",
           "default_runtime"}
"""Calls through which a module reaches an engine by one of its names (the registries and the descriptor lookups)."""
CROSS_ENGINE_EXCLUDED = {
    ("mobilize.backends.nnapi.host_check", "lite"): "NNAPI's exporter writes a lite-interpreter CPU twin beside its "
                                                    "file; the host check runs that twin in its own runtime",
}
"""(engine module, another engine's name) -> why the module asks for it."""


def cross_engine_lookups(modules: dict[str, str], engines: set[str]) -> list[str]:
    """An engine's module asking a registry or a descriptor lookup for a name another engine owns (its runtime,
    format, exporter or folder): one engine loading another through the descriptor."""
    names = engine_names()
    out = []
    for module, source in sorted(modules.items()):
        bits = module.split(".")
        if len(bits) < 3 or bits[1] != "backends" or bits[2] not in engines:
            continue
        for node in ast.walk(parse(source)):
            called = ast.unparse(node.func) if isinstance(node, ast.Call) else ""
            if called in LOOKUPS or called.rpartition(".")[2] in LOOKUPS:
                other = [n for a in node.args for n in _named(a, names)
                         if names[n] != bits[2] and (module, n) not in CROSS_ENGINE_EXCLUDED]
                if other:
                    out.append(f"{module}:{node.lineno}: {ast.unparse(node)[:100]} ({', '.join(other)})")
    return out


def test_no_engine_name_is_branched_on_outside_backends():
    """``== "onnxruntime"``, ``in ("executorch", ...)``, ``case "openvino":`` and ``{"litert": ...}`` keys outside
    ``backends/`` (docstrings and messages are not comparisons): ask the engine's capability instead."""
    assert not engine_name_offenders(sources(), engine_names())
    found = engine_name_offenders(sources(), engine_names(), excluded={})
    stale = [key for key in ENGINE_NAME_EXCLUDED if not any(f.startswith(f"{key[0]}:") and key[1] in f for f in found)]
    assert not stale, f"ENGINE_NAME_EXCLUDED entries no module needs any more (remove them): {stale}"


def test_a_planted_engine_name_branch_is_caught():
    planted = {**sources(), "mobilize.tune.planted": 'def pick(engine):\n    if engine == "onnxruntime":\n'
                                                     '        return 1\n    return 2\n'}
    assert engine_name_offenders(planted, engine_names()) == [
        "mobilize.tune.planted:2: engine == 'onnxruntime' (onnxruntime)"]
    for line in ('    match engine:\n        case "executorch":\n            pass\n',
                 '    return {"openvino": 1}[engine]\n', '    return engine in ("onnx", "nncf")\n'):
        one = {**sources(), "mobilize.tune.planted": f"def pick(engine):\n{line}"}
        assert len(engine_name_offenders(one, engine_names())) == 1, line


def test_no_engine_reaches_another_through_the_registries():
    assert not cross_engine_lookups(sources(), _engines(sources()))


def test_a_planted_cross_engine_lookup_is_caught():
    planted = {**sources(), "mobilize.backends.litert.runtime": sources()["mobilize.backends.litert.runtime"]
               + "\ndef f(art):\n    return BACKENDS.get('executorch').load('quant')\n"}
    found = cross_engine_lookups(planted, _engines(planted))
    assert len(found) == 1 and found[0].startswith("mobilize.backends.litert.runtime:") and "executorch" in found[0]
