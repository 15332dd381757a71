"""Decoder files of zoo:tiny_lm: mobilize's, beside the same model built by hand with each tool's documented
defaults, timed in ONE interleaved loop (the same prompt prefilled, the same token ids decoded with the cache),
each as a share of this machine's memory-bandwidth bound.  The CPU is named; the ratios are printed last.

By hand, as each tool's docs show it:
- ExecuTorch: transformers' ``TorchExportableModuleForDecoderOnlyLM`` with a static cache (the optimum-executorch
  route), XNNPACK; fp32 and 8da4w (torchao ``Int8DynamicActivationIntxWeightConfig``, int4, group 32).  mobilize
  uses ExecuTorch's custom SDPA and update_cache ops instead.
- ONNX Runtime: ``MatMulNBitsQuantizer`` with its defaults (block 128, asymmetric) on the same fp32 export.
- OpenVINO: ``nncf.compress_weights`` with INT4_ASYM and its defaults (group 128, adjusted where a layer's width
  does not divide by it) on the same fp32 IR.

    .venv/bin/python benchmarks/llm.py [--threads 2] [--rounds 7] [--prompt 32] [--gen 32]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch


def build_hand_et(folder: Path, out: Path, quant: bool, max_len: int) -> Path:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass
    from transformers.integrations.executorch import (TorchExportableModuleForDecoderOnlyLM,
                                                       TorchExportableModuleWithStaticCache)

    from mobilize.lowering.decoder import load_hf_decoder

    model = load_hf_decoder(folder)
    if quant:
        from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
        from torchao.quantization.granularity import PerGroup

        quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)))

    class StaticCache(TorchExportableModuleWithStaticCache):
        # transformers 5.24 with torch 2.13: point the cache layers at the registered buffers, else export lifts
        # them as constants and lowering fails (the only change to the documented route)
        def forward(self, input_ids=None, inputs_embeds=None, cache_position=None):
            for i, layer in enumerate(self.static_cache.layers):
                layer.keys, layer.values = getattr(self, f"key_cache_{i}"), getattr(self, f"value_cache_{i}")
                layer.cumulative_length = getattr(self, f"cumulative_length_{i}")
            return super().forward(input_ids=input_ids, inputs_embeds=inputs_embeds, cache_position=cache_position)

    model.generation_config.cache_implementation = "static"
    exportable = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=max_len)
    exportable.model = StaticCache(model, batch_size=1, max_cache_len=max_len)
    seq = torch.export.Dim("seq_len", min=1, max=max_len - 1)
    with torch.no_grad():
        ep = exportable.export(input_ids=torch.zeros((1, 2), dtype=torch.long), cache_position=torch.arange(2),
                               dynamic_shapes={"input_ids": {1: seq}, "cache_position": {0: seq}}, strict=False)
    program = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()],
                                          compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch(
        ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(["key_cache", "value_cache", "cumulative_length"])]))
    path = out / f"hand-{'8da4w' if quant else 'fp32'}.pte"
    path.write_bytes(program.buffer)
    return path


class HandEtSession:
    """The HF static-cache program: forward(input_ids, cache_position) -> logits; a reload resets the cache."""

    def __init__(self, path: Path):
        from executorch.runtime import Runtime

        self.program = Runtime.get().load_program(str(path))
        self.method, self.pos = None, 0

    def prefill(self, ids):
        self.method, self.pos = self.program.load_method("forward"), 0
        return self._run(ids)

    def decode(self, token):
        return self._run([token])[-1]

    def _run(self, ids):
        out = self.method.execute([torch.tensor([ids]), torch.arange(self.pos, self.pos + len(ids))])[0]
        self.pos += len(ids)
        return out[0].numpy()

    def close(self):
        self.method = None


def build_hand_ort_int4(fp32: Path, out: Path) -> Path:
    import logging

    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    q = MatMulNBitsQuantizer(onnx.load(str(fp32)))  # its defaults: 4 bits, block 128, asymmetric
    q.process()
    path = out / "hand-int4-defaults.onnx"
    q.model.save_model_to_file(str(path), use_external_data_format=False)
    return path


def build_hand_ov_int4(fp32_xml: Path, out: Path) -> Path:
    import nncf
    import openvino as ov

    from nncf.quantization.advanced_parameters import AdvancedCompressionParameters, GroupSizeFallbackMode

    # its defaults (INT4_ASYM, group 128); tiny_lm's 704-wide down projections do not divide by 128, so the
    # documented remedy: ADJUST those layers' group size
    model = nncf.compress_weights(ov.Core().read_model(str(fp32_xml)), mode=nncf.CompressWeightsMode.INT4_ASYM,
                                  advanced_parameters=AdvancedCompressionParameters(
                                      group_size_fallback_mode=GroupSizeFallbackMode.ADJUST))
    path = out / "hand-int4-asym.xml"
    ov.save_model(model, str(path), compress_to_fp16=False)
    return path


def main() -> None:
    from mobilize.accuracy.stats import ratio_ci
    from mobilize.bench.bandwidth import decode_bound, measure_bandwidth
    from mobilize.bench.rounds import schedule
    from mobilize.core.backend import BACKENDS
    from mobilize.core.target import host_cpu
    from mobilize.compare.decoder_worker import file_bytes
    from mobilize.generation.model import causal_lm
    from mobilize.sources.reference import ModelRef

    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--gen", type=int, default=32)
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # the exporters' deprecation chatter; the figures are what this prints
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    max_len = args.prompt + args.gen + 1
    work = Path(tempfile.mkdtemp(prefix="mobilize-llm-bench-"))
    folder = work / "model"
    causal_lm(ModelRef.parse("zoo:tiny_lm")).save_pretrained(str(folder))
    files, sessions = {}, {}
    t0 = time.time()
    for engine, name in (("executorch", "executorch-fp32"), ("executorch", "executorch-8da4w"),
                         ("onnxruntime", "onnx-fp32"), ("onnxruntime", "onnx-int4"),
                         ("openvino", "openvino-fp32"), ("openvino", "openvino-int4")):
        variant = BACKENDS.get(engine).entry("decoders", name)
        files[name] = variant.build(folder, work / name)
        sessions[name] = variant.load(files[name], args.threads, max_len)
    hand = {"hand:executorch-fp32": build_hand_et(folder, work, False, max_len),
            "hand:executorch-8da4w": build_hand_et(folder, work, True, max_len),
            "hand:onnx-int4": build_hand_ort_int4(files["onnx-fp32"], work),
            "hand:openvino-int4": build_hand_ov_int4(files["openvino-fp32"], work)}
    for name, path in hand.items():
        files[name] = path
        if path.suffix == ".pte":
            sessions[name] = HandEtSession(path)
        else:
            engine = "onnxruntime" if path.suffix == ".onnx" else "openvino"
            loader = next(iter(BACKENDS.get(engine).decoders))
            sessions[name] = BACKENDS.get(engine).entry("decoders", loader).load(path, args.threads, max_len)
    print(f"built {len(files)} files in {time.time() - t0:.0f} s")
    torch.set_num_threads(args.threads)
    prompt = [int(t) for t in np.random.default_rng(0).integers(1, 4096, size=args.prompt)]
    decode_ids = [int(t) for t in np.random.default_rng(1).integers(1, 4096, size=args.gen)]

    def run_round(name: str, n: int):
        s = sessions[name]
        s.prefill(prompt)
        times = []
        for token in decode_ids[:n]:
            t = time.perf_counter_ns()
            s.decode(token)
            times.append(time.perf_counter_ns() - t)
        return times, sum(times)

    bandwidth = measure_bandwidth()
    got = schedule(list(sessions), run_round, args.rounds, args.gen, warmup=2)
    cpu = host_cpu()
    print(f"\nCPU: {cpu.model} ({', '.join(f for f in ('avx2', 'avx512f', 'avx512_vnni', 'avx512_bf16', 'amx_int8') if f in cpu.flags)}), "
          f"{args.threads} thread(s); bandwidth {bandwidth.gb_per_s:.1f} GB/s ({bandwidth.how}); prompt {args.prompt}, "
          f"decode {args.gen} tokens x {args.rounds} interleaved rounds")
    print(f"{'file':<24} {'MB':>6} {'ms/token p50':>13} {'tok/s':>8} {'bound tok/s':>12} {'% bound':>8}")
    for name, rt in got.items():
        p50 = rt.stats().latency_ms_p50
        bound = decode_bound(bandwidth.gb_per_s, file_bytes(files[name]))
        print(f"{name:<24} {file_bytes(files[name]) / 1e6:6.2f} {p50:13.3f} {1e3 / p50:8.0f} {bound:12.0f} "
              f"{100 * (1e3 / p50) / bound:7.0f}%")
    print("(% bound above 100: the file's weights fit in the CPU's caches, which the DRAM copy does not measure)")
    print("\nmobilize's file vs the hand-built one (decode time per token: >1 means mobilize's is faster; 95% CI over "
          "paired rounds):")
    for ours in ("executorch-fp32", "executorch-8da4w", "onnx-int4", "openvino-int4"):
        ci = ratio_ci(got[f"hand:{ours}"].round_medians_ms, got[ours].round_medians_ms)
        print(f"  {ours:<20} {ci.ratio:.2f}x (95% CI {ci.low:.2f}-{ci.high:.2f})"
              f"{'' if ci.significant else ', a tie'}")
    for s in sessions.values():
        s.close()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
