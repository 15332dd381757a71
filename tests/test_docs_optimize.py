"""Issue #48 item 13: docs/getting-started.md showed an optimize line the command no longer printed.  The
optimize command shown there is run as written, and every line it prints about the file (the path line, the
notes and warnings) reads as the page shows it, numbers aside (they are one machine's)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "getting-started.md"


def shown(command_start: str) -> tuple[str, list[str]]:
    """The first ``$ mobilize ...`` line of the page starting with ``command_start`` and the lines shown after it."""
    lines = PAGE.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"$ {command_start}"))
    out = []
    for line in lines[at + 1:]:
        if line.startswith("$ ") or line.startswith("```"):
            break
        out.append(line)
    return lines[at][2:], out


def masked(line: str) -> str:
    """Numbers (and the words a bit-exact run prints in their place) as N: they are one machine's."""
    return re.sub(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?|\b(?:inf|exact)\b", "N", line)


def test_the_optimize_command_on_the_getting_started_page_prints_what_the_page_shows(tmp_path):
    command, expected = shown("mobilize optimize models.py:ScalarVad")
    shutil.copy(ROOT / "tests" / "user_models.py", tmp_path / "models.py")
    argv = [str(Path(sys.executable).with_name("mobilize")), *shlex.split(command)[1:]]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    printed = [masked(line) for line in (proc.stdout + proc.stderr).splitlines() if not line.startswith("[")]
    wanted = [masked(line) for line in expected if not line.startswith("[")]  # progress lines carry timings
    assert printed == wanted, "\n".join(printed)

