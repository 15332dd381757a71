"""The map of the parts (``src/mobilize/architecture.toml``, written once) checked on the source of every module
(every import form, lazy ones and ``importlib.import_module("mobilize...")`` strings included):

* layers: a part imports its own layer and the layers below, never above; every module is on the map;
* engines: nothing outside an engine's folder imports its modules (they are reached through the descriptor),
  and an engine never imports another;
* only the face (cli, the package root) imports ``mobilize.api``;
* cycles between parts only where the map lists them, with the reason;
* rooms: no file over the map's line limit, no logic in an ``__init__.py``, no long function without its reason;
* one function runs passes and exporters; verdict thresholds live only in the verify policy; one place assembles
  a verdict;
* ``except Exception`` / ``except BaseException`` / bare ``except:`` only in the one translation helper
  (``errors.third_party_failure``, where the bug-or-user-error decision is made), the CLI's last resort and
  the process boundaries; a handler that cleans up and re-raises unconditionally catches nothing.

Each rule is a function over a ``{module: source}`` map, so the tests below also plant a violation in a
copy of the real sources and check that the rule catches it; ``test_a_planted_engine_needs_no_edit_elsewhere``
plants a whole engine folder in a copy of the tree.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import mobilize

SRC = Path(mobilize.__file__).parent


def load_map(src: Path = SRC) -> dict:
    return tomllib.loads((src / "architecture.toml").read_text())


MAP = load_map()


def sources(src: Path = SRC) -> dict[str, str]:
    """``mobilize.x.y`` -> source, for every module of the package."""
    out = {}
    for path in src.rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(["mobilize", *parts])] = path.read_text()
    return out


def imports(module: str, source: str, modules: dict[str, str]) -> set[str]:
    """Every mobilize module ``module`` imports: ``import``, ``from ... import`` (names that are modules too),
    relative imports, and string arguments of ``importlib.import_module`` / ``__import__``."""
    found = set()
    package = f"{module}.__init__" if any(m.startswith(module + ".") for m in modules) else module
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level]
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


def _known(name: str, modules: dict[str, str]) -> str | None:
    """The longest prefix of ``name`` that is a module (``from a import b`` adds ``a.b``, which may be a function)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _engines(modules: dict[str, str]) -> set[str]:
    """Engine folders: the packages directly under ``mobilize.backends`` (modules beside them are shared code)."""
    return {m.split(".")[2] for m in modules if m.startswith("mobilize.backends.") and m.count(".") == 2
            and any(k.startswith(m + ".") for k in modules)}


def part(module: str, engines: set[str]) -> str:
    """``compare``, ``api``, ``backend:executorch`` or ``mobilize`` (the package root)."""
    bits = module.split(".")
    if len(bits) == 1:
        return "mobilize"
    if bits[1] == "backends" and len(bits) > 2 and bits[2] in engines:
        return f"backend:{bits[2]}"
    return bits[1]


def rank(the_part: str, layers: list[dict]) -> int | None:
    key = "backend:*" if the_part.startswith("backend:") else the_part
    return next((i for i, layer in enumerate(layers) if key in layer["parts"]), None)


def violations(modules: dict[str, str], the_map: dict = MAP) -> list[str]:
    """Every import that breaks a rule of the map, and every module the map does not place."""
    layers, rules, engines = the_map["layers"], the_map["rules"], _engines(modules)
    face = next(i for i, layer in enumerate(layers) if layer["name"] == "face")
    out = []
    for module, source in sorted(modules.items()):
        mine = part(module, engines)
        my_rank = rank(mine, layers)
        if my_rank is None:
            out.append(f"{module}: part '{mine}' is not on the map (src/mobilize/architecture.toml)")
            continue
        for target in sorted(imports(module, source, modules)):
            target = _known(target, modules)
            if target is None or target in (module, "mobilize"):  # the root package: its path or version
                continue
            theirs = part(target, engines)
            their_rank = rank(theirs, layers)
            if theirs.startswith("backend:") and theirs != mine and rules["engine_modules_private"]:
                out.append(f"{module} -> {target}: only {theirs[8:]}'s own modules import its modules "
                           f"(others reach it through the descriptor)")
            elif their_rank is not None and their_rank > my_rank:
                out.append(f"{module} -> {target}: {mine} ({layers[my_rank]['name']}) imports {theirs} "
                           f"({layers[their_rank]['name']}), a layer above it")
            if theirs in rules["only_face_imports"] and my_rank != face:
                out.append(f"{module} -> {target}: only the face ({', '.join(layers[face]['parts'])}) imports {theirs}")
    return out


def part_cycles(modules: dict[str, str], the_map: dict = MAP) -> list[str]:
    """Groups of parts that import each other (strongly connected), other than the map's listed cycles."""
    engines = _engines(modules)
    graph: dict[str, set[str]] = {}
    for module, source in modules.items():
        mine = part(module, engines)
        for target in imports(module, source, modules):
            target = _known(target, modules)
            if target and target != "mobilize" and part(target, engines) != mine:
                graph.setdefault(mine, set()).add(part(target, engines))
    allowed = [set(c["parts"]) for c in the_map.get("cycles", [])]
    out = []
    for group in _strongly_connected(graph):
        if len(group) > 1 and set(group) not in allowed:
            out.append(" <-> ".join(sorted(group)))
    return sorted(out)


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


ROOMS = MAP["rooms"]
INIT_WITH_CODE = {"mobilize": "PEP 562: the public names load on first use, and a subpackage import never hides "
                              "the function of the same name (mobilize.compare, .bench, .lint)"}
"""Packages whose ``__init__.py`` may define something, and why."""


def room_offenders(src: Path = SRC, modules: dict[str, str] | None = None) -> list[str]:
    """Files over the line limit, ``__init__.py`` files that define functions or classes, and functions over the
    limit whose docstring does not say why."""
    modules = sources(src) if modules is None else modules
    out = []
    for module, source in sorted(modules.items()):
        lines = source.count("\n")
        if lines > ROOMS["max_file_lines"]:
            out.append(f"{module}: {lines} lines (limit {ROOMS['max_file_lines']}): split it")
        tree = ast.parse(source)
        is_init = (src.joinpath(*module.split(".")[1:]) / "__init__.py").exists() or module == "mobilize"
        if is_init and module not in INIT_WITH_CODE and any(
                isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in tree.body):
            out.append(f"{module}: logic in __init__.py (it only imports and registers)")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                doc = ast.get_docstring(node) or ""
                if length > ROOMS["max_function_lines"] and ROOMS["long_function_marker"] not in doc:
                    out.append(f"{module}.{node.name}: {length} lines (limit {ROOMS['max_function_lines']}) "
                               f"without '{ROOMS['long_function_marker']} ...' in its docstring")
    return out


def test_every_room_is_small_enough():
    assert not room_offenders()


def test_planted_oversized_rooms_are_caught():
    modules = sources()
    modules["mobilize.sweep.runner"] += "\n" * ROOMS["max_file_lines"]
    modules["mobilize.camera"] += "\ndef helper():\n    return 1\n"
    body = "".join(f"    x{i} = {i}\n" for i in range(ROOMS["max_function_lines"]))
    modules["mobilize.lint.core"] += f"\ndef long_one():\n{body}"
    modules["mobilize.lint.config"] += f"\ndef long_two():\n    '''Long because: planted.'''\n{body}"
    found = room_offenders(modules=modules)
    assert any(f.startswith("mobilize.sweep.runner:") and "split it" in f for f in found), found
    assert "mobilize.camera: logic in __init__.py (it only imports and registers)" in found
    assert any(f.startswith("mobilize.lint.core.long_one:") for f in found)
    assert not any("long_two" in f for f in found)


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
    planted = {**sources(), "mobilize.sweep.runner": sources()["mobilize.sweep.runner"]
               + "\nif result.sqnr_db < 30:\n    pass\n"}
    assert threshold_offenders(planted) == ["mobilize.sweep.runner:%d: result.sqnr_db < 30"
                                            % (planted["mobilize.sweep.runner"].count("\n") - 1)]



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

def test_every_engine_folder_is_a_registered_backend():
    from mobilize.backends import BACKENDS

    folders = sorted(p.name for p in (SRC / "backends").iterdir() if (p / "__init__.py").exists())
    assert folders == sorted(BACKENDS.names()) == sorted(_engines(sources()))
    assert all(BACKENDS.get(name).name == name for name in folders)


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


TOY_ENGINE = {
    "__init__.py": '''"""Toy: an engine planted by the architecture test (a descriptor, a runtime and a lint probe)."""

from mobilize.backends import BACKENDS
from mobilize.core.backend import Backend

BACKENDS.register("toy")(Backend(
    name="toy",
    formats={"toyfile": "toy"},
    suffixes={".toy": "toyfile"},
    runtimes={"toy": "runtime:ToySession"},
    lint_targets={"toy": "lint_probe"},
    noise=("[toy-noise]",),
))
''',
    "runtime.py": '''"""Toy runtime: runs nothing (planted by the architecture test)."""

from mobilize.runtimes.base import Session


class ToySession(Session):
    """Toy runtime planted by the architecture test."""

    def _load(self):
        raise NotImplementedError

    def prepare(self, inputs):
        return inputs

    def run_prepared(self, native):
        return native

    def set_threads(self, threads):
        return None
''',
    "lint_probe.py": '''"""Toy lint probe: takes every op (planted by the architecture test)."""

from mobilize.lint.report import TargetSupport

PACKAGES = ("torch",)
PIP = "torch"
HOW = "the toy probe"
LABEL = "Toy"
FIX = "none needed"


def probe(subject):
    return TargetSupport("toy", "supported", HOW, partitions=1, summary="toy takes the whole model")
''',
}


def test_a_planted_engine_needs_no_edit_elsewhere(tmp_path):
    """One folder under backends/ in a copy of the tree, nothing else edited: the registry lists it, its suffix
    names its format, ``mobilize list`` shows its runtime, lint probes it, the noise filter knows its lines,
    plans still load, and the architecture rules accept the copy."""
    copy = tmp_path / "src" / "mobilize"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pt"))
    (copy / "backends" / "toy").mkdir()
    for name, text in TOY_ENGINE.items():
        (copy / "backends" / "toy" / name).write_text(text)
    assert not violations(sources(copy), load_map(copy))
    assert not part_cycles(sources(copy), load_map(copy))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    script = ("import mobilize, sys\n"
              "assert mobilize.__file__.startswith(sys.argv[1]), mobilize.__file__\n"
              "from mobilize.backends import BACKENDS, format_for_suffix, default_runtime\n"
              "from mobilize.core.noise import is_noise\n"
              "from mobilize.plans.plan import load_plan\n"
              "from mobilize.lint import LintConfig, lint\n"
              "from mobilize.core.inputs import InputSpec\n"
              "assert 'toy' in BACKENDS.names(), BACKENDS.names()\n"
              "assert format_for_suffix('.toy') == 'toyfile' and default_runtime('toyfile') == 'toy'\n"
              "assert is_noise('[toy-noise] nothing to act on')\n"
              "assert [v.name for v in load_plan('quick').variants]\n"
              "report = lint('zoo:conv_bn_relu', LintConfig(targets=('toy',), time=False),"
              " input_specs=[InputSpec((1, 3, 16, 16))])\n"
              "[toy] = report.targets\n"
              "assert toy.target == 'toy' and toy.status == 'supported', toy\n"
              "print('ok')\n")
    ran = subprocess.run([sys.executable, "-c", script, str(copy)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0 and ran.stdout.strip().endswith("ok"), ran.stderr[-3000:]
    listed = subprocess.run([sys.executable, "-m", "mobilize", "list", "runtimes"], env=env, capture_output=True,
                            text=True, timeout=300)
    assert listed.returncode == 0 and "Toy runtime planted by the architecture test" in listed.stdout, listed
