"""llama.cpp: GGUF decoder files made by llama.cpp's own converter (``convert_hf_to_gguf.py``) and quantizer
(``llama_model_quantize``, what ``llama-quantize`` calls), run through libllama by llama-cpp-python.  A decoder-only
engine: GGUF holds a whole generative model with its tokenizer, not a tensor program, so it has no tensor runtime.
Installed by ``scripts/setup-llamacpp.sh`` (optional, cached outside the repo, like the arm64 root)."""

from mobilize.backends import BACKENDS
from mobilize.core.backend import Backend

BACKENDS.register("llamacpp")(Backend(
    name="llamacpp",
    formats={},
    suffixes={".gguf": "gguf"},
    decoders={"llamacpp-f16": "decoder:F16", "llamacpp-q8_0": "decoder:Q8_0", "llamacpp-q4_0": "decoder:Q4_0",
              "llamacpp-q4_k_m": "decoder:Q4_K_M"},
    packages=("llama_cpp", "gguf"),
))
