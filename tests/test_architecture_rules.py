"""Rules over the code beside the map (``architecture.toml``'s ``[rooms]`` and the one-place rules), each a function
over a ``{module: source}`` map with a planted violation:

* rooms: no file over the line limit, no logic in an ``__init__.py``, no long function without its reason and
  none, whatever its reason, over the hard cap;
* one function runs passes and exporters (also through a name: ``cls = EXPORTERS.get(...)``; ``cls(...)``);
* verdict thresholds live only in the verify policy - as literals or as named module constants;
* one place assembles a verdict;
* ``except Exception`` / ``except BaseException`` / bare ``except:`` / ``contextlib.suppress(Exception)`` only in
  the one translation helper (``errors.third_party_failure``), the CLI's last resort and the process boundaries;
  a handler that cleans up and re-raises unconditionally catches nothing;
* one package check (``core/packages.py``) and one SQNR formula (``accuracy/metrics.py``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.test_architecture import MAP, SRC, _functions, parse, sources

ROOMS = MAP["rooms"]
INIT_WITH_CODE = {"mobilize": "PEP 562: the public names load on first use, and a subpackage import never hides "
                              "the function of the same name (mobilize.compare, .bench, .lint)"}
"""Packages whose ``__init__.py`` may define something, and why."""
OVER_THE_CAP: dict[str, str] = {}
"""``module.function`` -> why it may be longer than ``hard_max_function_lines`` (none today)."""


def room_offenders(src: Path = SRC, modules: dict[str, str] | None = None) -> list[str]:
    """Files over the line limit, ``__init__.py`` files that define functions or classes, functions over the
    limit whose docstring does not say why, and functions over the hard cap."""
    modules = sources(src) if modules is None else modules
    out = []
    for module, source in sorted(modules.items()):
        lines = source.count("\n")
        if lines > ROOMS["max_file_lines"]:
            out.append(f"{module}: {lines} lines (limit {ROOMS['max_file_lines']}): split it")
        tree = parse(source)
        is_init = (src.joinpath(*module.split(".")[1:]) / "__init__.py").exists() or module == "mobilize"
        if is_init and module not in INIT_WITH_CODE and any(
                isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in tree.body):
            out.append(f"{module}: logic in __init__.py (it only imports and registers)")
        out += _long_functions(module, tree)
    return out


def _long_functions(module: str, tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            doc = ast.get_docstring(node) or ""
            if length > ROOMS["hard_max_function_lines"] and f"{module}.{node.name}" not in OVER_THE_CAP:
                out.append(f"{module}.{node.name}: {length} lines, over the cap of {ROOMS['hard_max_function_lines']} "
                           f"whatever its reason: split it")
            elif length > ROOMS["max_function_lines"] and ROOMS["long_function_marker"] not in doc:
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
    huge = "".join(f"    x{i} = {i}\n" for i in range(ROOMS["hard_max_function_lines"]))
    modules["mobilize.lint.html"] += f"\ndef long_three():\n    '''Long because: planted.'''\n{huge}"
    found = room_offenders(modules=modules)
    assert any(f.startswith("mobilize.sweep.runner:") and "split it" in f for f in found), found
    assert "mobilize.camera: logic in __init__.py (it only imports and registers)" in found
    assert any(f.startswith("mobilize.lint.core.long_one:") for f in found)
    assert not any("long_two" in f for f in found)
    assert any(f.startswith("mobilize.lint.html.long_three:") and "over the cap" in f for f in found)


def runners(modules: dict[str, str]) -> set[str]:
    """Modules that instantiate passes or exporters from their registries and run them: ``PASSES.get(n)(c)``
    directly, or a name bound to ``EXPORTERS.get(...)`` and then called."""
    found = set()
    for module, source in modules.items():
        tree = parse(source)
        bound = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and _registry_get(node.value)
                 for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (_registry_get(node.func)
                                               or (isinstance(node.func, ast.Name) and node.func.id in bound)):
                found.add(module)
    return found


def _registry_get(node: ast.AST) -> bool:
    """``PASSES.get(...)`` or ``EXPORTERS.get(...)``."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and isinstance(node.func.value, ast.Name) and node.func.value.id in ("PASSES", "EXPORTERS"))


def test_one_function_runs_passes_and_exporters():
    """Only build.py instantiates passes and exporters from their registries and runs them
    (``PASSES.get(name)(config)(...)``, ``EXPORTERS.get(name)(config).export(...)``)."""
    assert runners(sources()) == {"mobilize.pipeline.build"}
    planted = {**sources(), "mobilize.tune": sources()["mobilize.tune"] + "\nEXPORTERS.get('onnx')(None).export(m, c, s)\n"}
    assert runners(planted) == {"mobilize.pipeline.build", "mobilize.tune"}
    through_a_name = {**sources(), "mobilize.tune.explain": sources()["mobilize.tune.explain"]
                      + "\ndef f(name, m, c, s):\n    cls = EXPORTERS.get(name)\n    return cls(None).export(m, c, s)\n"}
    assert runners(through_a_name) == {"mobilize.pipeline.build", "mobilize.tune.explain"}


METRICS = ("cosine", "sqnr", "agreement", "top1", "max_abs", "drop", "within")


def threshold_offenders(modules: dict[str, str]) -> list[str]:
    """Comparisons of an accuracy metric with a numeric literal (int or float; 0 and 1 are not thresholds)
    outside accuracy/verify.py."""
    out = []
    for module, source in modules.items():
        if module == "mobilize.accuracy.verify":
            continue
        for node in ast.walk(parse(source)):
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


THRESHOLD_NAME = re.compile(r"_DB$|MIN|MAX|THRESHOLD")
"""A module constant named like a threshold (``FLOAT_MIN_SQNR_DB``, ``MAX_DROP``, ``SCORE_THRESHOLD``)."""
NAMED_LIMITS = {
    ("mobilize.accuracy.task_measures", "SCORE_THRESHOLD"): "a detector's box-score cut-off: part of the task "
                                                            "measure's definition (which boxes count), not a verdict",
    ("mobilize.camera.frames", "MAX_FRAME_SIDE"): "a limit on the user's --frames size, checked before any work",
    ("mobilize.generation.model", "MAX_DECODER_TOKENS"): "a limit on --prompt-len + --gen-len, checked before any "
                                                         "work",
    ("mobilize.accuracy.stats", "OUTLIER_MIN_ROUNDS"): "part of the speed estimator's definition (which rounds may be "
                                                       "left out as outliers, said in ESTIMATOR and the report), not "
                                                       "an accuracy verdict",
    ("mobilize.accuracy.tasks", "SEG_MAX_CLASSES"): "part of the task guess (which outputs read as per-pixel class "
                                                    "scores, said in the task line), not a verdict",
}
"""(module, constant) -> why a threshold-named constant outside the Policy is not a verdict threshold."""


def named_threshold_offenders(modules: dict[str, str], excluded: dict = NAMED_LIMITS) -> list[str]:
    """Comparisons with a module-level numeric constant named like a threshold, outside the Policy
    (accuracy/verify.py), the engines' folders (an engine's own limits: ``MIN_OPSET``) and ``excluded``."""
    constants: dict[str, str] = {}
    for module, source in modules.items():
        for node in parse(source).body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if isinstance(value, ast.Constant) and type(value.value) in (int, float):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                constants.update({t.id: module for t in targets if isinstance(t, ast.Name)
                                  and THRESHOLD_NAME.search(t.id)})
    out = []
    for module, source in sorted(modules.items()):
        if module == "mobilize.accuracy.verify" or module.startswith("mobilize.backends."):
            continue
        for node in ast.walk(parse(source)):
            if isinstance(node, ast.Compare):
                used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                used |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
                for name in sorted(used & set(constants)):
                    if (module, name) not in excluded:
                        out.append(f"{module}:{node.lineno}: {ast.unparse(node)} ({name} from {constants[name]})")
    return out


def test_no_verdict_threshold_hides_in_a_named_constant():
    assert not named_threshold_offenders(sources())
    found = named_threshold_offenders(sources(), excluded={})
    stale = [key for key in NAMED_LIMITS if not any(f"{key[0]}:" in f and f"({key[1]} " in f for f in found)]
    assert not stale, f"NAMED_LIMITS entries no module needs any more (remove them): {stale}"
    planted = {**sources(), "mobilize.compare.planted": "MIN_SQNR_DB = 30.0\n\ndef ok(r):\n"
                                                        "    return r.sqnr_db >= MIN_SQNR_DB\n"}
    assert named_threshold_offenders(planted) == [
        "mobilize.compare.planted:4: r.sqnr_db >= MIN_SQNR_DB (MIN_SQNR_DB from mobilize.compare.planted)"]


ASSEMBLY = ("judge_budget", "judge_task", "against_both")
"""The halves of a quality verdict; ``verify.assess`` puts them together, and nothing else may."""


def assemblers(modules: dict[str, str]) -> list[str]:
    """Calls of a budget half outside accuracy/verify.py (a second place that assembles the budget)."""
    out = []
    for module, source in modules.items():
        if module == "mobilize.accuracy.verify":
            continue
        for node in ast.walk(parse(source)):
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


def _suppresses_everything(node: ast.AST) -> bool:
    """``contextlib.suppress(Exception)`` / ``suppress(BaseException, ...)``: a broad catch written as a context."""
    return (isinstance(node, ast.Call)
            and any(isinstance(a, ast.Name) and a.id in ("Exception", "BaseException") for a in node.args)
            and ast.unparse(node.func).rpartition(".")[2] == "suppress")  # unparse last: it is the slow part


def broad_catches(modules: dict[str, str]) -> list[str]:
    """``module:line (function)`` for every handler that catches Exception, BaseException or everything, and every
    ``contextlib.suppress`` of them, outside BROAD_CATCHES."""
    out = []
    for module, source in modules.items():
        tree = parse(source)
        functions = _functions(tree)
        for node in ast.walk(tree):
            where = functions.get(id(node), "<module>")
            if (module, where) in BROAD_CATCHES:
                continue
            if isinstance(node, ast.ExceptHandler) and _broad(node) and not _reraises(node):
                caught = ast.unparse(node.type) if node.type else ""
                out.append(f"{module}:{node.lineno} ({where}): except {caught}".rstrip())
            elif _suppresses_everything(node):
                out.append(f"{module}:{node.lineno} ({where}): {ast.unparse(node)}")
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


def test_a_planted_suppress_of_everything_is_caught():
    planted = {**sources(), "mobilize.lint.core": sources()["mobilize.lint.core"]
               + "\ndef f():\n    with contextlib.suppress(ValueError, Exception):\n        g()\n"}
    lines = planted["mobilize.lint.core"].count("\n")
    assert broad_catches(planted) == [f"mobilize.lint.core:{lines - 1} (f): contextlib.suppress(ValueError, Exception)"]


PACKAGE_CHECK = "mobilize.core.packages"
"""The one module that asks whether a package is installed (``importlib.util.find_spec``)."""
SQNR = "mobilize.accuracy.metrics"
"""The one module that writes the SQNR formula (``10 * log10(signal / noise)``)."""


def one_place_offenders(modules: dict[str, str]) -> list[str]:
    """``find_spec`` calls outside :data:`PACKAGE_CHECK` and ``10·log10``/``20·log10`` products outside :data:`SQNR`."""
    out = []
    for module, source in sorted(modules.items()):
        for node in ast.walk(parse(source)):
            if (module != PACKAGE_CHECK and isinstance(node, ast.Call)
                    and ast.unparse(node.func).rpartition(".")[2] == "find_spec"):
                out.append(f"{module}:{node.lineno}: {ast.unparse(node)} (ask mobilize.core.packages)")
            elif (module != SQNR and isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)
                  and any(isinstance(s, ast.Constant) and s.value in (10, 20) for s in (node.left, node.right))
                  and "log10" in ast.unparse(node)):
                out.append(f"{module}:{node.lineno}: {ast.unparse(node)} (accuracy.metrics.sqnr_from_powers)")
    return sorted(out, key=lambda line: (line.split(":")[0], int(line.split(":")[1])))


def test_one_package_check_and_one_sqnr_formula():
    assert not one_place_offenders(sources())
    planted = {**sources(), "mobilize.tune.planted": "import importlib.util, math\n"
                                                     "ok = importlib.util.find_spec('onnx') is not None\n"
                                                     "db = 10 * math.log10(s / n)\n"}
    assert one_place_offenders(planted) == [
        "mobilize.tune.planted:2: importlib.util.find_spec('onnx') (ask mobilize.core.packages)",
        "mobilize.tune.planted:3: 10 * math.log10(s / n) (accuracy.metrics.sqnr_from_powers)"]
