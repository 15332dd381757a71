"""Verify artifacts on arm64 kernels without a phone: the file runs inside an arm64 Debian root with PyPI's
aarch64 wheels (built by ``scripts/setup-arm64.sh``) under QEMU user emulation, and its outputs are judged
by the verify core beside the host's.  Emulated outputs are the target's; emulated times are not latency.

    $ sudo bash scripts/setup-arm64.sh
    $ mobilize verify out/compare/artifacts/executorch-fp16/model.pte --on arm64 --model zoo:digits_mobilenet_v2
    $ mobilize compare --verify-on arm64

Modules: :mod:`~mobilize.arm64.run` (the child process, on the host or in the root),
:mod:`~mobilize.arm64.child` (what runs inside), :mod:`~mobilize.arm64.verdict` (engine-free judging and
flagging), :mod:`~mobilize.arm64.compare` (compare's ``--verify-on arm64``).
"""

from mobilize.arm64.files import kind_of, report_lines, require_arm64, verify_file

__all__ = ["require_arm64", "report_lines", "verify_file", "kind_of"]
