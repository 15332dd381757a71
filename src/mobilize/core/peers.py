"""The field's own export CLIs that cannot live in mobilize's venv - optimum-executorch pins transformers 5.0.0rc1,
optimum-intel transformers < 5.6 and huggingface-hub < 1.22 - each in its own venv under :func:`peers_dir`, made by
``scripts/setup-peers.sh``.  A peer variant runs the CLI in a child process on the saved model folder, offline, and
opens the file it wrote with mobilize's own session for that engine, so the peer's file is judged and timed like
any other variant of the generation plan; where the venv is absent the variant is left out with this reason.

Nothing here re-implements the tools: the argv is the one-line command their READMEs give, plus what each
variant's docstring names (the cache length; optimum-intel's own ``--group-size-fallback adjust``).

    >>> PeerCli("optimum-executorch", "transformers 5.0.0rc1").cli().name
    'optimum-cli'
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

from mobilize.core.errors import UnsupportedByEngineError, UnsupportedModelError, tool_reason

SETUP = "bash scripts/setup-peers.sh"


def peers_dir() -> Path:
    """``MOBILIZE_PEERS_DIR``, else ``~/.cache/mobilize/peers``: one venv per peer tool, outside the repo (cached
    like the llama.cpp build and the arm64 root)."""
    return Path(os.environ.get("MOBILIZE_PEERS_DIR") or Path.home() / ".cache" / "mobilize" / "peers")


@dataclasses.dataclass(frozen=True)
class PeerCli:
    """One peer tool's venv (``peers_dir()/TOOL``) and its ``optimum-cli``."""

    tool: str
    pins: str
    """What it pins that mobilize's venv cannot take (why it has its own venv)."""

    def cli(self) -> Path:
        return peers_dir() / self.tool / "bin" / "optimum-cli"

    def available(self) -> str | None:
        """Why the tool cannot run here, or None."""
        if not os.access(self.cli(), os.X_OK):
            return (f"{self.tool}'s CLI is not installed (it pins {self.pins}, so it gets its own venv: {SETUP}; "
                    f"looked for {self.cli()})")
        return None

    def export(self, args: list[str], out_dir: Path, writes: str) -> Path:
        """``optimum-cli export ARGS OUT`` offline (the model is the saved folder; nothing is downloaded) into
        ``out_dir/TOOL``, its output kept in ``out_dir/TOOL.log``; returns ``out_dir/TOOL/WRITES``, the file the tool
        writes.  A failure is an UnsupportedByEngineError with the tool's own reason; no file, an
        UnsupportedModelError naming the log."""
        why = self.available()
        if why:
            raise UnsupportedByEngineError(why)
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        out, log = out_dir / self.tool, out_dir / f"{self.tool}.log"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        env.pop("PYTHONPATH", None)  # mobilize's own paths would shadow the peer venv's packages
        with log.open("w") as sink:
            done = subprocess.run([str(self.cli()), "export", *args, str(out)], stdout=sink, stderr=subprocess.STDOUT,
                                  env=env, cwd=out_dir)
        if done.returncode != 0:
            raise UnsupportedByEngineError(f"{self.tool} cannot export this model (exit {done.returncode}): "
                                           f"{tool_reason(log.read_text(errors='replace'))} (its log: {log})")
        if not (out / writes).is_file():
            raise UnsupportedModelError(f"{self.tool} wrote no {writes} in {out} (its log: {log})")
        return out / writes


OPTIMUM_EXECUTORCH = PeerCli("optimum-executorch", "transformers 5.0.0rc1")
OPTIMUM_INTEL = PeerCli("optimum-intel", "transformers < 5.6 and huggingface-hub < 1.22")
