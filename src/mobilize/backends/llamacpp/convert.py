"""llama.cpp's own GGUF converter (``convert_hf_to_gguf.py``, installed by ``scripts/setup-llamacpp.sh`` under
``.venv/share/llama.cpp`` from the same sdist as libllama) run on a saved transformers folder, in a child process
(it imports torch and transformers again and ends with ``sys.exit``), its output kept for the refusal.

Two things are written here by hand, because the converter has no option for them.  A BPE tokenizer whose vocabulary
llama.cpp has never seen (the zoo's own, a user's freshly trained one) is refused by the converter's pre-tokenizer
check, which recognises tokenizers by a hash of the ids they give a test string, not by their split rule.  When that
check fails and the tokenizer's pre-tokenizer is byte-level BPE with GPT-2's split (``ByteLevel``, ``use_regex``),
which is exactly llama.cpp's ``gpt-2`` pre-tokenizer, the converter is told ``gpt-2``; any other unknown tokenizer is
refused with the converter's own reason.  ``tests/backends/llamacpp`` checks that libllama then gives the same ids
as the tokenizer for real text.  And its GPT-2 reads the context as ``n_ctx``, a name transformers' ``GPT2Config``
no longer writes (it writes ``n_positions``; the converter failed on ``KeyError: 'n_ctx'``): the hyper-parameters
it loads get ``n_ctx`` from ``n_positions`` where only that is there (:func:`with_gpt2_context`).

    >>> with_gpt2_context({"model_type": "gpt2", "n_positions": 128})["n_ctx"]
    128

    >>> byte_level_gpt2({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}})
    True
    >>> byte_level_gpt2({"pre_tokenizer": {"type": "Metaspace"}})
    False
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from mobilize.core.errors import UnsupportedByEngineError, tool_reason

SETUP = "bash scripts/setup-llamacpp.sh"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")
"""What the converter builds the GGUF's vocabulary from (a BPE ``tokenizer.json`` or a SentencePiece model)."""


def share() -> Path:
    """Where setup-llamacpp.sh put the converter (beside this interpreter's venv)."""
    return Path(sys.prefix) / "share" / "llama.cpp"


def available() -> str | None:
    """Why llama.cpp cannot run here, or None."""
    from mobilize.core.packages import installed

    if not installed("llama_cpp"):
        return f"llama.cpp is not installed here (llama-cpp-python builds libllama from source, ~15 min once: {SETUP})"
    if not (share() / "convert_hf_to_gguf.py").is_file() or not installed("gguf"):
        return f"llama.cpp's converter or its gguf-py is not installed under {share()} ({SETUP})"
    return None


def byte_level_gpt2(tokenizer: dict[str, Any]) -> bool:
    """True when a ``tokenizer.json``'s pre-tokenizer is GPT-2's: byte-level with GPT-2's split regex."""
    pre = tokenizer.get("pre_tokenizer") or {}
    return pre.get("type") == "ByteLevel" and bool(pre.get("use_regex", True))


def with_gpt2_context(hparams: dict[str, Any]) -> dict[str, Any]:
    """A GPT-2 config's hyper-parameters with ``n_ctx`` (llama.cpp's name) from ``n_positions`` (transformers')."""
    if isinstance(hparams, dict) and "n_ctx" not in hparams and "n_positions" in hparams:
        return {**hparams, "n_ctx": hparams["n_positions"]}
    return hparams


def convert(folder: Path, out: Path, outtype: str, timeout_s: float | None = None) -> Path:
    """``convert_hf_to_gguf.py FOLDER --outfile OUT --outtype OUTTYPE``; a model the converter cannot take is an
    UnsupportedByEngineError with its reason (one line)."""
    folder = Path(folder)
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise UnsupportedByEngineError(
            f"llama.cpp's converter needs the model's tokenizer (a GGUF file carries it): {folder} has no "
            f"tokenizer.json or tokenizer.model (save the tokenizer beside the model)")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "mobilize.backends.llamacpp.convert", str(folder), str(out), outtype],
                          capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0 or not out.is_file():
        why = tool_reason(done.stderr)
        if "tokenizer.model" in why and not (folder / "tokenizer.model").is_file():  # its last fallback, SentencePiece
            why = (f"it does not recognise the tokenizer (a BPE it knows by a hash of its ids or a byte-level one with "
                   f"GPT-2's split, else a SentencePiece tokenizer.model): {why}")
        raise UnsupportedByEngineError(f"llama.cpp's converter cannot take this model: {why}")
    return out


def _main(folder: str, out: str, outtype: str) -> None:
    """In the child: the converter's ``main`` with the two patches the module docstring describes."""
    import runpy

    root = share()
    sys.path[:0] = [str(root), str(root / "gguf-py")]
    import conversion.base as base

    recognised = base.TextModel.get_vocab_base_pre

    def pre_tokenizer(self: Any, tokenizer: Any) -> str:
        try:
            return recognised(self, tokenizer)
        except NotImplementedError:
            spec = Path(self.dir_model) / "tokenizer.json"
            if spec.is_file() and byte_level_gpt2(json.loads(spec.read_text())):
                return "gpt-2"
            raise

    base.TextModel.get_vocab_base_pre = pre_tokenizer
    loaded = base.ModelBase.load_hparams
    base.ModelBase.load_hparams = staticmethod(lambda *args, **kwargs: with_gpt2_context(loaded(*args, **kwargs)))
    sys.argv = ["convert_hf_to_gguf.py", folder, "--outfile", out, "--outtype", outtype]
    runpy.run_path(str(root / "convert_hf_to_gguf.py"), run_name="__main__")


if __name__ == "__main__":
    _main(*sys.argv[1:4])
