"""``mobilize generate PACKAGE --prompt TEXT``: text from a decoder package that compare or optimize wrote
(``artifacts/NAME/``: the file, its tokenizer and configs, ``mobilize.json``), in that file's own engine,
streamed as it is produced, then the time to the first token and tokens per second.

    $ mobilize generate out/compare/artifacts/executorch-8da4w --prompt "import os" --max-new-tokens 32
    $ mobilize generate out/compare/artifacts/onnx-int4 --prompt "def " --temperature 0.8 --top-p 0.9 --seed 1
    $ echo "Once upon a time" | mobilize generate out/compare/artifacts/llamacpp-q4_k_m --prompt-file -

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
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--prompt", help="the text to continue")
    given.add_argument("--prompt-file", metavar="FILE", help="read the text to continue from FILE (UTF-8); - reads "
                                                               "standard input")
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

    prompt = _prompt(args)
    config = GenerateConfig(prompt, args.max_new_tokens, Sampling(args.temperature, args.top_k, args.top_p,
                                                                  args.seed), args.chat, args.threads)

    echoed = []  # the prompt is written with the first generated text: a prompt refused (too long for the file,
    # a package that does not load) is not echoed above the one-line error

    def show(text: str) -> None:
        if not echoed:
            echoed.append(sys.stdout.write(prompt))
        sys.stdout.write(text)
        sys.stdout.flush()

    try:
        result = generate(args.package, config, on_text=show)
    except KeyboardInterrupt:  # the text streamed so far ends its line: what is said next starts a line of its own
        if echoed:
            sys.stdout.write("\n")
            sys.stdout.flush()
        raise
    show("")  # the prompt, when the model added no text to it
    print()
    print(result.speed_line(), file=sys.stderr)
    return 0


def _prompt(args: argparse.Namespace) -> str:
    """--prompt as typed, or --prompt-file's bytes (standard input's for -), as UTF-8 text."""
    from mobilize.core.errors import ConfigError
    from mobilize.generation.generate import text_of

    if args.prompt is not None:
        return text_of(args.prompt, "--prompt")
    if args.prompt_file == "-":
        return text_of(sys.stdin.buffer.read(), "the prompt on standard input")
    try:
        with open(args.prompt_file, "rb") as fh:
            return text_of(fh.read(), f"--prompt-file {args.prompt_file}")
    except OSError as exc:
        raise ConfigError(f"--prompt-file {args.prompt_file}: {exc.strerror or exc}",
                          hint="give a readable text file, or - for standard input") from None
