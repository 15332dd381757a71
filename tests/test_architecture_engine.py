"""Adding an engine is one folder: a whole engine planted under ``backends/`` in a copy of the tree, with no edit
anywhere else, is listed, exported, benched, linted and held to the contract tests like the built-in ones.

The toy engine stores a traced TorchScript program under its own suffix (``.toy``): small enough to read, real
enough to run.  Its runtime declares neither ``name`` nor ``formats`` (the descriptor gives them), and its lint
probe imports only lint's types (``mobilize.lint.support``).  :func:`plant` makes the copy; another planted engine
(a decoder-only one, say) is one more ``{file: text}`` map handed to it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_architecture import SRC, load_map, part_cycles, sources, violations

ROOT = SRC.parents[1]

TOY_ENGINE = {
    "__init__.py": '''"""Toy: an engine planted by the architecture test (exporter, runtime, lint probe, its contract case)."""

from mobilize.backends import BACKENDS
from mobilize.core.backend import Backend

BACKENDS.register("toy")(Backend(
    name="toy",
    formats={"toyfile": "toy"},
    suffixes={".toy": "toyfile"},
    exporters={"toy": "exporter:ToyExporter"},
    runtimes={"toy": "runtime:ToySession"},
    lint_targets={"toy": "lint_probe"},
    contract={"toy": "toy"},
    noise=("[toy-noise]",),
))
''',
    "exporter.py": '''"""Toy exporter: the model traced to TorchScript, saved as ``.toy`` (planted by the architecture test)."""

from mobilize.exporters.base import Exporter


class ToyExporter(Exporter):
    name = "toy"
    format = "toyfile"
    suffix = ".toy"

    def write(self, module, ctx, path):
        import torch

        with torch.no_grad():
            torch.jit.trace(module.eval(), tuple(ctx.example_inputs())).save(str(path))
''',
    "runtime.py": '''"""Toy runtime: a ``.toy`` file through ``torch.jit.load`` (planted by the architecture test)."""

from mobilize.runtimes.torch_session import TorchSession


class ToySession(TorchSession):
    """Toy runtime planted by the architecture test."""

    def _load(self):
        import torch

        self.module = torch.jit.load(str(self.target.path), map_location="cpu").eval()
''',
    "lint_probe.py": '''"""Toy lint probe: takes every op (planted by the architecture test)."""

from mobilize.lint.support import TargetSupport

PACKAGES = ("torch",)
PIP = "torch"
HOW = "the toy probe"
LABEL = "Toy"
FIX = "none needed"


def probe(subject):
    return TargetSupport("toy", "supported", HOW, partitions=1, summary="toy takes the whole model")
''',
}


def plant(tmp_path: Path, name: str, files: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """A copy of ``src/mobilize`` with ``backends/NAME/`` holding ``files`` and nothing else changed; the copy's
    root and the environment that imports ``mobilize`` from it."""
    copy = tmp_path / "src" / "mobilize"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pt"))
    (copy / "backends" / name).mkdir()
    for file, text in files.items():
        (copy / "backends" / name / file).write_text(text)
    return copy, {**os.environ, "PYTHONPATH": str(tmp_path / "src")}


def _run(argv: list[str], env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


LOOKUPS = ('''import mobilize, sys
assert mobilize.__file__.startswith(sys.argv[1]), mobilize.__file__
from mobilize.backends import BACKENDS, format_for_suffix, default_runtime
from mobilize.core.context import Context
from mobilize.core.inputs import InputSpec
from mobilize.core.noise import is_noise
from mobilize.exporters import EXPORTERS
from mobilize.lint import LintConfig, lint
from mobilize.plans.plan import load_plan
assert 'toy' in BACKENDS.names(), BACKENDS.names()
assert format_for_suffix('.toy') == 'toyfile' and default_runtime('toyfile') == 'toy'
assert is_noise('[toy-noise] nothing to act on')
assert [v.name for v in load_plan('quick').variants]
report = lint('zoo:conv_bn_relu', LintConfig(targets=('toy',), time=False), input_specs=[InputSpec((1, 3, 16, 16))])
[toy] = report.targets
assert toy.target == 'toy' and toy.status == 'supported', toy
from mobilize.sources.models import resolve_model
model = resolve_model('zoo:conv_bn_relu').module
EXPORTERS.get('toy')().export(model, Context(input_specs=[InputSpec((1, 3, 16, 16))]), sys.argv[2])
print('ok')
''')


@pytest.mark.e2e
def test_a_planted_engine_needs_no_edit_elsewhere(tmp_path):
    """One folder under backends/ in a copy of the tree, nothing else edited: the architecture rules accept the
    copy; the registry lists it, its suffix names its format, ``mobilize list`` shows its runtime, lint probes it,
    the noise filter knows its lines, plans still load; its exporter writes a file that ``mobilize bench FILE``
    times in its runtime; and the contract tests run its runtime and exporter."""
    copy, env = plant(tmp_path, "toy", TOY_ENGINE)
    assert not violations(sources(copy), load_map(copy))
    assert not part_cycles(sources(copy), load_map(copy))
    ran = _run([sys.executable, "-c", LOOKUPS, str(copy), str(tmp_path / "tiny")], env)
    assert ran.returncode == 0 and ran.stdout.strip().endswith("ok"), ran.stderr[-3000:]
    listed = _run([sys.executable, "-m", "mobilize", "list", "runtimes"], env)
    assert listed.returncode == 0 and "Toy runtime planted by the architecture test" in listed.stdout, listed
    benched = _run([sys.executable, "-m", "mobilize", "bench", str(tmp_path / "tiny.toy"), "--iter", "5",
                    "--warmup", "1", "--threads", "1"], env)
    assert benched.returncode == 0, benched.stderr[-3000:]
    assert "runtime toy" in benched.stdout and "Main run finished. Microseconds per iter:" in benched.stdout, benched
    contract = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                     "tests/contract/test_registries.py", "-k", "toy and (runtime_contract or exporter_contract)"], env)
    assert contract.returncode == 0 and "2 passed" in contract.stdout, contract.stdout[-3000:] + contract.stderr[-2000:]


DECODER_ENGINE = {
    "__init__.py": '''"""Toydec: a decoder-only engine planted by the architecture test (one decoder variant, nothing else)."""

from mobilize.backends import BACKENDS
from mobilize.core.backend import Backend

BACKENDS.register("toydec")(Backend(
    name="toydec",
    formats={},
    decoders={"toydec-fp32": "decoder:FP32"},
))
''',
    "decoder.py": '''"""Toydec's decoder: the saved transformers folder copied, run with no cache (each step a full forward over every
token so far), planted by the architecture test."""

import shutil
from pathlib import Path

from mobilize.core.decoder import CachedDecoderSession, DecoderVariant, Promise


def build(folder: Path, out_dir: Path) -> Path:
    target = Path(out_dir) / "model-toydec"
    shutil.copytree(folder, target, dirs_exist_ok=True)
    return target


class ToydecSession(CachedDecoderSession):
    def __init__(self, path: Path, threads: int, max_len: int):
        from transformers import AutoModelForCausalLM

        self.lm = AutoModelForCausalLM.from_pretrained(str(path)).float().eval()
        self.max_len, self.ids = max_len, []

    def _start(self) -> None:
        self.ids = []

    def _forward(self, ids, start):
        import torch

        self.ids = self.ids[:start] + list(ids)
        with torch.no_grad():
            logits = self.lm(input_ids=torch.tensor([self.ids]), use_cache=False).logits[0]
        return logits[-len(ids):].float().numpy()

    def close(self) -> None:
        self.lm = None


FP32 = DecoderVariant(name="toydec-fp32", engine="toydec", weights="fp32", promise=Promise.FLOAT, build=build,
                      load=ToydecSession, packages=("torch", "transformers"), how="the transformers model, no cache")
''',
}


@pytest.mark.e2e
def test_a_planted_decoder_only_engine_joins_the_generation_plan(tmp_path):
    """A decoder-only engine (one folder, ``Backend.decoders`` and nothing else) is a variant of the generation plan:
    ``compare --task generation`` builds, judges and times its file beside eager's, and the decoder contract tests
    hold it to the same refusals - with no edit outside its folder."""
    copy, env = plant(tmp_path, "toydec", DECODER_ENGINE)
    assert not violations(sources(copy), load_map(copy))
    out = tmp_path / "out"
    ran = _run([sys.executable, "-m", "mobilize", "compare", "zoo:tiny_lm", "--variant", "eager-fp32", "--variant",
                "toydec-fp32", "--prompt-len", "4", "--gen-len", "4", "--eval-len", "16", "--rounds", "2",
                "--time-budget", "1", "--threads", "1", "-o", str(out)], env)
    assert ran.returncode == 0, ran.stderr[-3000:]
    import json

    report = json.loads((out / "report.json").read_text())
    [toy] = [v for v in report["variants"] if v["name"] == "toydec-fp32"]
    assert toy["outcome"] == "OK" and toy["tokens"]["engine"] == "toydec", toy
    assert toy["verdict"]["fidelity"]["rule"] == "float-sqnr" and toy["tokens"]["decode_tokens_per_s"] > 0
    assert (out / "artifacts" / "toydec-fp32" / "mobilize.json").is_file()  # a package like every engine's
    contract = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/contract/test_decoders.py",
                     "-k", "toydec"], env)
    assert contract.returncode == 0 and " passed" in contract.stdout, contract.stdout[-3000:] + contract.stderr[-2000:]
