"""The process engine (:mod:`mobilize.pipeline.process`): spawned children and children forked from the torch-preloading
server compare uses for its torch workers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from mobilize.pipeline.process import Child
from tests.cli.test_hardening import alive as _alive

ROOT = Path(__file__).resolve().parents[2]


def test_a_preloaded_child_comes_with_torch_a_spawned_one_without_and_both_keep_sigint_blocked():
    forked = Child(_describe(), preload=True)
    spawned = Child(_describe())
    try:
        f, s = forked.recv(120), spawned.recv(120)
    finally:
        forked.close()
        spawned.close()
    assert f["torch"] and not s["torch"]  # lean timing workers (spawned) must not carry torch
    assert f["sigint_blocked"] and s["sigint_blocked"]  # Ctrl-C is the parent's to handle
    assert s["parent"] == os.getpid()
    assert f["parent"] != os.getpid() and f["grandparent"] == os.getpid()  # forked from the server, our child


def test_each_preload_set_has_its_own_server_and_a_torch_child_never_carries_transformers():
    """A decoder job that loads transformers forks from a server that has it; a child of the torch server (another
    engine's check, whose peak memory is reported for its file) still comes without it, whichever started first."""
    from mobilize.pipeline.process import DECODER_PRELOAD

    decoder, torch_only, again = Child(_describe(), preload=DECODER_PRELOAD), Child(_describe(), preload=True), \
        Child(_describe(), preload=DECODER_PRELOAD)
    try:
        d, t, a = decoder.recv(180), torch_only.recv(180), again.recv(180)
    finally:
        for child in (decoder, torch_only, again):
            child.close()
    assert d["torch"] and d["transformers"] and a["transformers"]
    assert t["torch"] and not t["transformers"]
    assert d["sigint_blocked"] and t["sigint_blocked"] and a["sigint_blocked"]
    assert d["grandparent"] == t["grandparent"] == os.getpid()
    assert d["parent"] == a["parent"] != t["parent"]  # one server per set of modules, started once


def test_a_preloaded_child_dies_when_its_parent_is_killed():
    """The parent killed outright (SIGKILL, no clean-up): its fork server sees its pipe close and exits, and the
    worker forked from the server dies with it (PR_SET_PDEATHSIG), so nothing keeps running."""
    script = ("import sys, time\nfrom mobilize.pipeline.process import Child\nfrom tests.process_children import sleep_forever\n"
              "c = Child(sleep_forever, preload=True)\nprint(c.recv(120), flush=True)\ntime.sleep(600)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        worker = int(proc.stdout.readline())
        assert _alive(worker)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker)


def _describe():
    from tests.process_children import describe

    return describe

