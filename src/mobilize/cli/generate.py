"""``mobilize generate PACKAGE --prompt TEXT``: text from a decoder package that compare or optimize wrote
(``artifacts/NAME/``: the file, its tokenizer and configs, ``mobilize.json``), in that file's own engine,
streamed as it is produced, then the time to the first token and tokens per second.

    $ mobilize generate out/compare/artifacts/executorch-8da4w --prompt "import os" --max-new-tokens 32
    $ mobilize generate out/compare/artifacts/onnx-int4 --prompt "def " --temperature 0.8 --top-p 0.9 --seed 1

Exit codes: 0 generated; 2 bad input (no package there, no tokenizer, a prompt longer than the file holds); 1 a bug.
"""

from __future__ import annotations

import argparse
import sys


def add_parser(sub) -> None:
    p = sub.add_parser("generate", help="text from a decoder file mobilize built, in its own engine",
                       description="Tokenize the prompt with the package's tokenizer, prefill it, decode with the "
                                   "file's KV cache (greedy, or sampled with --temperature/--top-k/--top-p/--seed), "
                                   "stream the text, stop at the model's end-of-sequence tokens, and say the time to "
                                   "the first token and tokens/s.")
    p.add_argument("package", metavar="FOLDER_OR_FILE",
                   help="a decoder package: a folder under artifacts/ that compare or optimize wrote, or its file")
    p.add_argument("--prompt", required=True, help="the text to continue")
    p.add_argument("--max-new-tokens", type=int, default=64, metavar="N", help="most tokens to generate (default 64)")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T",
                   help="0: greedy, the most likely token (default); above 0: sampled")
    p.add_argument("--top-k", type=int, default=0, metavar="K", help="sample among the K most likely (0: all)")
    p.add_argument("--top-p", type=float, default=1.0, metavar="P",
                   help="sample among the most likely tokens up to probability P (default 1: all)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="the sampler's seed (the same seed, the same text)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the tokenizer's chat template (a user turn)")
    p.add_argument("--threads", type=int, default=None, help="threads for the runtime (default: all cores)")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=run, inputs=[("package", "FOLDER_OR_FILE")])


def run(args: argparse.Namespace) -> int:
    from mobilize.generation.generate import GenerateConfig, Sampling, generate

    config = GenerateConfig(args.prompt, args.max_new_tokens, Sampling(args.temperature, args.top_k, args.top_p,
                                                                       args.seed), args.chat, args.threads)

    def show(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    sys.stdout.write(args.prompt)
    result = generate(args.package, config, on_text=show)
    print()
    print(result.speed_line(), file=sys.stderr)
    return 0
