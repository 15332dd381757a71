"""Rule output-steps: an int8 NNAPI file against its CPU twin, end to end, in output quantization steps.

The twin computes the same quantized graph with qnnpack's kernels, so each operation may land a step apart and the
steps compound; the bound comes from the rounding model (the file's graph with each operation's output moved a step
on the shares its own check measured).  A file whose outputs move beyond that fails, with its figures and the rule's
name, even where every operation passes its own check and the SQNR is far above the quantized floor (8 dB).

The planted perturbations are real: the NNAPI file's weights are rewritten and the file saved again, its twin
untouched.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from mobilize.accuracy.verify import DEFAULT_POLICY
from mobilize.backends.nnapi import host_check
from mobilize.backends.nnapi import nnapi_format as fmt
from mobilize.core.artifact import Artifact
from mobilize.core.context import Context
from mobilize.core.inputs import InputSpec
from mobilize.pipeline.build import build
from mobilize.pipeline.recipe import load_recipe


class _WideNet(nn.Module):
    """A conv, a 128-channel linear bottleneck (one channel is under 1% of its elements), pooling, a linear head."""

    def __init__(self):
        super().__init__()
        self.quant, self.dequant = torch.ao.quantization.QuantStub(), torch.ao.quantization.DeQuantStub()
        self.conv, self.relu = nn.Conv2d(3, 16, 3, padding=1), nn.ReLU()
        self.wide = nn.Conv2d(16, 128, 1)
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        x = self.wide(self.relu(self.conv(self.quant(x))))
        return self.dequant(self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)))


def plant(src: Path, dst: Path, op_index: int, channel: int | None, bias_steps: int = 0,
          weight_scale: float = 1.0) -> None:
    """``src`` saved again as ``dst`` (with its manifest) with operation ``op_index``'s bias moved by ``bias_steps``
    of its output steps and its weights scaled by ``weight_scale``, on one output channel (None: all)."""
    module = torch.jit.load(str(src))
    payload = fmt.read_pipeline(module).payload
    model = fmt.parse_model(payload.ser_model)
    op = model.operations[op_index]
    bias_operand, out = model.operands[op.inputs[2]], model.operands[op.outputs[0]]
    where = slice(None) if channel is None else slice(channel, channel + 1)
    weights = list(payload.module.weights)
    for index, move in ((op.inputs[2], lambda r: r + round(bias_steps * out.scale / bias_operand.scale)),
                        (op.inputs[1], lambda r: ((r.long() - zero) * weight_scale).round().long() + zero)):
        value = model.values[index]
        assert value.offset == 0
        w = weights[value.buffer]
        zero, r = w.q_zero_point(), w.int_repr().clone()
        r[where] = move(r[where]).clamp(torch.iinfo(r.dtype).min, torch.iinfo(r.dtype).max).to(r.dtype)
        weights[value.buffer] = torch._make_per_tensor_quantized_tensor(r, w.q_scale(), zero)
    payload.module.weights = weights
    module._save_for_lite_interpreter(str(dst))
    shutil.copy(f"{src}.manifest.json", f"{dst}.manifest.json")


def _exported(model: nn.Module, shape: tuple, mode: str, out: Path, monkeypatch) -> tuple[Artifact, dict]:
    """The file built by the recipe, and what its host check was given (to check planted copies the same way)."""
    seen = {}
    real = host_check.compare_with_twin

    def keep(*args):
        seen["args"] = args
        return real(*args)

    monkeypatch.setattr(host_check, "compare_with_twin", keep)
    art = build(model, load_recipe(f"nnapi-{mode}"), Context(input_specs=[InputSpec(shape)]), out).artifacts[0].artifact
    return art, seen


def _check(art: Artifact, planted: Path, seen: dict) -> dict:
    """The host check of ``planted`` (the NNAPI file, its weights rewritten) against ``art``'s twin."""
    _, twin, ctx, probe, _, qparams, full = seen["args"]
    payload = fmt.read_pipeline(torch.jit.load(str(planted))).payload
    return host_check.compare_with_twin(Artifact.from_file(planted), twin, ctx, probe, payload, qparams, full)


def _wide_op(art: Artifact) -> int:
    model = fmt.parse_model(fmt.read_pipeline(torch.jit.load(str(art.path))).payload.ser_model)
    return next(k for k, op in enumerate(model.operations)
                if op.name == "CONV_2D" and model.operands[op.outputs[0]].dims[-1] == 128)


@pytest.mark.parametrize("mode", ["core", "full"])
def test_a_file_within_a_step_passes_and_one_channel_moved_fails_the_output_rule(tmp_path, monkeypatch, mode):
    """One bottleneck channel's bias moved 60 steps: its operation passes its own check (under 1% of its elements
    move), the SQNR stays far above the 8 dB floor, and the outputs move many steps: rule output-steps fails it."""
    torch.manual_seed(0)
    art, seen = _exported(_WideNet().eval(), (1, 3, 8, 8), mode, tmp_path / "ok", monkeypatch)
    good = _check(art, art.path, seen)["end_to_end"]
    assert good["ok"] and good["verdict"]["rule"] == "output-steps", good["summary"]
    assert good["max_steps"] <= 1 and "(rule output-steps)" in good["summary"]
    assert any("(rule output-steps)" in n for n in Artifact.from_file(art.path).notes)

    planted = art.path.with_name("planted.nnapi.ptl")
    plant(art.path, planted, _wide_op(art), channel=0, bias_steps=60)
    result = _check(art, planted, seen)
    bad = result["end_to_end"]
    assert result["per_operation"]["ok"] and not result["ok"], result["summary"]
    assert not bad["ok"] and bad["verdict"]["rule"] == "output-steps" and bad["verdict"]["outcome"] == "MISMATCH"
    numbers = bad["verdict"]["numbers"]
    assert numbers["max_steps"] > numbers["max_max_steps"] and numbers["max_steps"] >= 5, bad["summary"]
    assert numbers["max_ratio"] == DEFAULT_POLICY.output_steps_max_ratio
    assert bad["sqnr_db"] > 8.0  # the quantized SQNR floor alone would have passed it
    for figure in ("output elements within one step (rounding model:", "RMS", "max", "(rule output-steps)"):
        assert figure in bad["summary"]


def test_the_rule_scales_with_the_rounding_model():
    """The bounds are the Policy's multiple of the model's RMS and max, never under one step."""
    steps = torch.tensor([0, 1, 1, 0, 2, 3])
    wide = host_check.judge_output_steps(steps, torch.tensor([0, 2, 1, 3, 1, 2, 0, 1]))
    assert wide.ok and wide.numbers["max_max_steps"] == 6 and wide.rule == "output-steps"
    narrow = host_check.judge_output_steps(steps, torch.zeros(8, dtype=torch.long))
    assert not narrow.ok and narrow.numbers["max_max_steps"] == 1 and narrow.numbers["max_rms_steps"] == 1.0
    assert "max 3 steps > 1" in narrow.reason and "(rule output-steps)" in narrow.reason
    assert host_check.judge_output_steps(torch.ones(6, dtype=torch.long), torch.zeros(8, dtype=torch.long)).ok


def test_the_rounding_model_moves_only_the_measured_shares(tmp_path, monkeypatch):
    """No measured rounding differences: the model's runs equal the file's; every element moved up: one step."""
    torch.manual_seed(0)
    art, seen = _exported(_WideNet().eval(), (1, 3, 8, 8), "core", tmp_path, monkeypatch)
    _, _, ctx, probe, payload, qparams, _ = seen["args"]
    inputs = [[torch.quantize_per_tensor(ctx.example_inputs(seed=1)[0], *qparams, torch.quint8)
               .contiguous(memory_format=torch.channels_last)]]
    assert all(int(d.max()) == 0 for d in host_check.rounding_model(probe, payload, inputs, {}))
    last = len(fmt.parse_model(payload.ser_model).operations) - 1
    moved = host_check.rounding_model(probe, payload, inputs, {last: (1.0, 0.0)}, draws=2)
    assert len(moved) == 2 and all(int(d.min()) == int(d.max()) == 1 for d in moved)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["core", "full"])
def test_trained_digits_passes_and_a_scaled_conv_fails(tmp_path, monkeypatch, mode):
    """The digits-trained MobileNetV2 (96x96): the real file passes rule output-steps; the same file with its last
    bottleneck conv's weights scaled by 1.3 fails it (and its own op check), at an SQNR the 8 dB floor passed."""
    from mobilize.zoo import ZOO

    art, seen = _exported(ZOO.get("digits_mobilenet_v2").build(), (1, 3, 96, 96), mode, tmp_path, monkeypatch)
    good = _check(art, art.path, seen)["end_to_end"]
    assert good["ok"] and good["verdict"]["rule"] == "output-steps", good["summary"]
    model = fmt.parse_model(fmt.read_pipeline(torch.jit.load(str(art.path))).payload.ser_model)
    last = max(k for k, op in enumerate(model.operations)
               if op.name == "CONV_2D" and model.operands[op.outputs[0]].dims[-1] == 160)
    planted = art.path.with_name("planted.nnapi.ptl")
    plant(art.path, planted, last, channel=None, weight_scale=1.3)
    bad = _check(art, planted, seen)["end_to_end"]
    assert not bad["ok"] and bad["verdict"]["rule"] == "output-steps" and bad["sqnr_db"] > 8.0, bad["summary"]
