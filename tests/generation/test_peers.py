"""The peers' own export CLIs (optimum-executorch, optimum-intel) as variants of the generation plan: each lives in
its own venv (scripts/setup-peers.sh); absent, the variant is left out naming the script; present, its CLI runs
offline with its README's flags and a failure is the tool's own reason in one line.  Where a venv is installed,
tests/contract/test_decoders.py holds its file to every decoder's contract (it skips them, saying why, elsewhere)."""

from __future__ import annotations

import os
import stat

import pytest

PEERS = ("optimum-executorch-8da4w", "optimum-intel-int4")


def plant_cli(root, tool: str, body: str) -> None:
    """A stand-in ``optimum-cli`` in ``root/TOOL/bin``: it records its argv and environment, then runs ``body``."""
    cli = root / tool / "bin" / "optimum-cli"
    cli.parent.mkdir(parents=True)
    cli.write_text(f'#!/bin/sh\necho "$@" > "{root}/{tool}.argv"\nenv > "{root}/{tool}.env"\n{body}\n')
    cli.chmod(cli.stat().st_mode | stat.S_IEXEC)


def test_a_peer_without_its_venv_is_left_out_naming_the_script(tmp_path, monkeypatch):
    from mobilize.generation.plan import decoder_plan

    monkeypatch.setenv("MOBILIZE_PEERS_DIR", str(tmp_path))
    plan, notes = decoder_plan()
    assert not {s.name for s in plan.variants} & set(PEERS)
    for name in PEERS:
        [note] = [n for n in notes if f"left out {name}:" in n]
        assert "scripts/setup-peers.sh" in note and "own venv" in note and str(tmp_path) in note, note


@pytest.mark.parametrize("name, tool, expect", [
    ("optimum-executorch-8da4w", "optimum-executorch",
     "export executorch --model {folder} --task text-generation --recipe xnnpack --use_custom_sdpa "
     "--use_custom_kv_cache --qlinear 8da4w --qembedding 8w --max_seq_len 64 --output_dir"),
    ("optimum-intel-int4", "optimum-intel",
     "export openvino --model {folder} --task text-generation-with-past --weight-format int4 "
     "--group-size-fallback adjust"),
])
def test_a_peer_cli_runs_offline_with_its_readme_flags_and_its_failure_is_one_line(
        name, tool, expect, tmp_path, monkeypatch, tiny_llama):
    from mobilize.core.errors import UnsupportedByEngineError
    from mobilize.generation.plan import generation_variants, unavailable

    peers = tmp_path / "peers"
    plant_cli(peers, tool, 'echo "Traceback (most recent call last):"\necho "  File x.py, line 1"\n'
                           'echo "ValueError: Unrecognized configuration class LlamaConfig"\nexit 3')
    monkeypatch.setenv("MOBILIZE_PEERS_DIR", str(peers))
    [variant] = generation_variants([name])
    assert unavailable(variant) is None
    with pytest.raises(UnsupportedByEngineError) as caught:
        variant.build_file(tiny_llama, tmp_path / "out")
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{tool} cannot export this model (exit 3): ValueError: "
                                                      "Unrecognized configuration class LlamaConfig"), message
    assert (tmp_path / "out" / f"{tool}.log").is_file() and f"{tool}.log" in message
    argv = (peers / f"{tool}.argv").read_text()
    assert argv.startswith(expect.format(folder=os.path.realpath(tiny_llama))), argv
    env = dict(line.split("=", 1) for line in (peers / f"{tool}.env").read_text().splitlines() if "=" in line)
    assert env.get("HF_HUB_OFFLINE") == "1" and env.get("TRANSFORMERS_OFFLINE") == "1"  # nothing downloaded


def test_a_peer_that_writes_no_file_is_refused_naming_its_log(tmp_path, monkeypatch, tiny_llama):
    from mobilize.core.errors import UnsupportedModelError
    from mobilize.generation.plan import generation_variants

    peers = tmp_path / "peers"
    plant_cli(peers, "optimum-intel", "exit 0")
    monkeypatch.setenv("MOBILIZE_PEERS_DIR", str(peers))
    [variant] = generation_variants(["optimum-intel-int4"])
    with pytest.raises(UnsupportedModelError, match="optimum-intel wrote no openvino_model.xml in .*optimum-intel.log"):
        variant.build_file(tiny_llama, tmp_path / "out")
