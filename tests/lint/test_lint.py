"""mobilize lint: each rule fires on a model built to break it (and nothing else fires), the zoo models, the
per-target probes, the profile, the CLI's exit codes and the HTML fragment."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mobilize.lint import LintConfig, Rule, Severity, lint, summary_dict
from mobilize.core.inputs import InputSpec

SMALL = [InputSpec((1, 3, 32, 32))]
NO_TARGETS = LintConfig(targets=())


def cbr(cin: int, cout: int, k: int = 3, groups: int = 1, act: type = nn.ReLU) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), act())


class Head(nn.Module):
    def __init__(self, cin: int, classes: int = 10):
        super().__init__()
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def frozen(model: nn.Module) -> nn.Module:
    """Eval mode, no grad: so only the rule a model is built to break can fire."""
    torch.manual_seed(0)
    return model.eval().requires_grad_(False)


def clean() -> nn.Module:
    """Mobile-friendly: stem, depthwise-separable block, clamp-like activations, widths of 8."""
    return frozen(nn.Sequential(cbr(3, 16), cbr(16, 16, groups=16, act=nn.ReLU6), cbr(16, 32, 1, act=nn.Hardswish),
                                Head(32)))


def rules_of(report) -> set[str]:
    return {str(f.rule) for f in report.findings}


def findings(report, rule: Rule) -> list:
    return [f for f in report.findings if f.rule == rule]


# -- one model per rule ----------------------------------------------------------------------------------
def test_clean_model_fires_nothing():
    report = lint(clean(), NO_TARGETS, input_specs=SMALL)
    assert report.findings == [], [f.headline() for f in report.findings]
    assert not report.fired


def test_channels_rule_names_layer_and_mac_change():
    model = frozen(nn.Sequential(cbr(3, 16), cbr(16, 20, 1), cbr(20, 16, 1), Head(16)))
    report = lint(model, NO_TARGETS, input_specs=SMALL)
    assert rules_of(report) == {"channels"}
    (f,) = findings(report, Rule.CHANNELS)
    assert f.module == "1.0" and f.severity == Severity.WARN
    n = f.numbers
    assert (n["channels"], n["channels_down"], n["channels_up"]) == (20, 16, 24)
    # this 1x1 16->20 conv and the 1x1 20->16 conv reading it: 32*32*16*20 MACs each, scaled by 16/20 or 24/20
    assert n["readers"] == ["2.0"] and n["macs_affected"] == 2 * 32 * 32 * 16 * 20
    assert n["macs_change_down"] == -131072 and n["macs_change_up"] == 131072
    assert "16 (-131.1k MACs) or 24 (+131.1k MACs)" in f.fix


class BetweenConvAndBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = cbr(3, 16)
        self.conv = nn.Conv2d(16, 16, 1)
        self.act = nn.ReLU()
        self.bn = nn.BatchNorm2d(16)
        self.head = Head(16)

    def forward(self, x):
        return self.head(self.bn(self.act(self.conv(self.stem(x)))))


class SharedBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 16, 1)
        self.bn = nn.BatchNorm2d(16)
        self.head = Head(16)

    def forward(self, x):
        return self.head(F.relu(self.bn(self.b(F.relu(self.bn(self.a(x)))))))


class GroupedTransposeBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = cbr(3, 16)
        self.up = nn.ConvTranspose2d(16, 16, 2, stride=2, groups=2, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.head = Head(16)

    def forward(self, x):
        return self.head(F.relu(self.bn(self.up(self.stem(x)))))


class ConvOutputShared(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = cbr(3, 8)
        self.conv = nn.Conv2d(8, 8, 1)
        self.bn = nn.BatchNorm2d(8)
        self.head = Head(16)

    def forward(self, x):
        y = self.conv(self.stem(x))
        return self.head(torch.cat([y, F.relu(self.bn(y))], 1))


@pytest.mark.parametrize("model, bn, reason", [
    (BetweenConvAndBN, "bn", "between"), (SharedBN, "bn", "shared"), (GroupedTransposeBN, "bn", "fold-fails"),
    (ConvOutputShared, "bn", "conv-output-shared"),
])
def test_conv_bn_rule_says_why_it_cannot_fold(model, bn, reason):
    report = lint(frozen(model()), NO_TARGETS, input_specs=SMALL)
    assert rules_of(report) == {"conv-bn"}, [f.headline() for f in report.findings]
    (f,) = findings(report, Rule.CONV_BN)
    assert (f.module, f.numbers["reason"]) == (bn, reason)
    if reason == "between":
        assert "ReLU act sits between Conv2d conv" in f.message and "move the BN directly after conv" in f.fix
    if reason == "fold-fails":
        assert "ConvTranspose2d up" in f.message and "groups=1" in f.fix


class GeluAndSilu(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = cbr(3, 16, act=nn.GELU)
        self.conv = nn.Conv2d(16, 16, 1)
        self.head = Head(16)

    def forward(self, x):
        return self.head(F.silu(self.conv(self.stem(x))))


def test_activation_rule_modules_and_functions():
    report = lint(frozen(GeluAndSilu()), NO_TARGETS, input_specs=SMALL)
    assert rules_of(report) == {"activation"}
    found = {(f.module, f.numbers["activation"], f.numbers["replacement"]) for f in report.findings}
    assert found == {("stem.2", "gelu", "ReLU (or Hardswish)"), ("", "silu", "Hardswish")}
    silu = next(f for f in report.findings if f.numbers["activation"] == "silu")
    assert "after Conv2d conv" in silu.message and silu.location and silu.location.startswith("test_lint.py:")
    assert all("int8_sqnr_db" not in f.numbers for f in report.findings)  # measured only with data


def test_activation_int8_error_layer_time_and_onnxruntime_on_data():
    config = LintConfig(targets=("onnxruntime",), int8_samples=8, time_runs=5, time_warmup=1)
    report = lint(frozen(GeluAndSilu()), config, input_specs=SMALL, data="digits")
    assert rules_of(report) == {"activation"}
    ort = report.target("onnxruntime")  # the CPU provider takes every node: one partition
    assert ort.status == "ok" and ort.partitions == 1 and ort.ops_supported == ort.ops_total > 0
    assert "CPUExecutionProvider" in ort.details["nodes_by_provider"]
    for f in report.findings:
        assert f.numbers["int8_samples"] == 8
        assert 10 < f.numbers["int8_sqnr_db"] < 80 and f.numbers["int8_max_abs_error"] > 0
        assert "dB on 8 samples of 'digits'" in f.message
    profile = report.profile
    assert profile.total_time_ms > 0 and "onnxruntime" in profile.timed_on and "'digits'" in profile.timed_on
    assert all(r.time_ms is not None for r in profile.rows)
    assert sum(r.time_share for r in profile.rows) == pytest.approx(1.0)
    conv_rows = [r for r in profile.rows if r.module in ("stem.0", "conv")]
    assert len(conv_rows) == 2 and all(r.time_ms > 0 for r in conv_rows)


def test_depthwise_rule_states_the_factor():
    model = frozen(nn.Sequential(cbr(3, 16), cbr(16, 32), Head(32)))
    report = lint(model, NO_TARGETS, input_specs=SMALL)
    assert rules_of(report) == {"depthwise"}
    (f,) = report.findings
    assert f.module == "1.0"
    assert f.numbers["macs"] == 32 * 32 * 9 * 16 * 32
    assert f.numbers["macs_separable"] == 32 * 32 * (9 * 16 + 16 * 32)
    assert f.numbers["factor"] == pytest.approx(9 * 16 * 32 / (9 * 16 + 16 * 32), abs=0.01)
    assert "7.0x fewer" in f.message and "groups=16" in f.fix


def test_training_mode_and_training_only_modules():
    model = clean()
    model.train()
    report = lint(model, NO_TARGETS, input_specs=SMALL)
    assert rules_of(report) == {"training-mode"}
    (f,) = report.findings
    assert f.module == "" and "model.eval()" in f.fix and len(f.numbers["modules"]) == 3
    assert model.training  # lint never changes the model it was given

    blocks = list(clean())
    model = frozen(nn.Sequential(*blocks[:3], nn.Dropout(0.1), blocks[3]))
    model[1][1].train()  # one BN left in training mode after an eval()
    report = lint(model, NO_TARGETS, input_specs=SMALL)
    assert {(str(f.rule), f.module, str(f.severity)) for f in report.findings} == {
        ("training-mode", "1.1", "warn"), ("training-only", "3", "info")}


def test_observers_left_in_the_model_are_training_only_warnings():
    model = clean()
    model[2].add_module("3", torch.ao.quantization.MinMaxObserver())
    report = lint(model, NO_TARGETS, input_specs=SMALL)
    assert {(str(f.rule), f.module, str(f.severity)) for f in report.findings} == {("training-only", "2.3", "warn")}


def test_requires_grad_is_one_info_finding():
    model = clean().requires_grad_(True)
    report = lint(model, NO_TARGETS, input_specs=SMALL)
    assert rules_of(report) == {"requires-grad"}
    assert report.findings[0].severity == Severity.INFO and not report.fired


class Residual(nn.Module):
    def __init__(self, functional: bool):
        super().__init__()
        self.stem = cbr(3, 16)
        self.block = nn.Sequential(cbr(16, 16, groups=16), cbr(16, 16, 1))
        self.skip = torch.ao.nn.quantized.FloatFunctional() if functional else None
        self.head = Head(16)

    def forward(self, x):
        x = self.stem(x)
        x = self.skip.add(x, self.block(x)) if self.skip is not None else x + self.block(x)
        return self.head(x * 0.5)  # a scalar multiply is fine for eager int8


def test_float_functional_rule_flags_plain_adds_only():
    report = lint(frozen(Residual(functional=False)), NO_TARGETS, input_specs=SMALL)
    assert rules_of(report) == {"float-functional"}
    (f,) = report.findings
    assert f.module == "" and f.numbers["op"] == "add" and "x + y" in f.message and "FloatFunctional" in f.fix
    assert f.location.startswith("test_lint.py:")
    assert lint(frozen(Residual(functional=True)), NO_TARGETS, input_specs=SMALL).findings == []


class Branchy(nn.Module):
    """Data-dependent control flow: FX cannot trace it, fake tensors cannot run it."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(3, 12, 3, padding=1), nn.BatchNorm2d(12), nn.GELU())
        self.fc = nn.Linear(12, 10)

    def forward(self, x):
        x = self.a(x)
        if x.sum() > 0:
            x = x * 2
        return self.fc(x.mean((2, 3)))


def test_untraceable_model_still_gets_module_checks_and_says_what_it_skipped():
    report = lint(frozen(Branchy()), NO_TARGETS, input_specs=SMALL)
    assert {(str(f.rule), f.module) for f in report.findings} == {("channels", "a.0"), ("activation", "a.2")}
    assert any("not FX-traceable" in n for n in report.notes)
    assert report.profile.total_macs == 32 * 32 * 27 * 12 + 12 * 10  # counted on a real forward pass instead


# -- zoo models and the profile ---------------------------------------------------------------------------
def test_toy_classifier_is_flagged_for_its_channel_counts():
    report = lint("zoo:toy_classifier", NO_TARGETS, input_specs=[InputSpec((1, 3, 32, 32))])
    flagged = {f.module: f.numbers["channels"] for f in findings(report, Rule.CHANNELS)}
    assert flagged == {"features.3": 18, "features.9": 33, "features.15": 59, "features.21": 107,
                       "features.27": 194, "features.39": 637, "features.45": 1154}
    assert report.fired and rules_of(report) == {"channels", "requires-grad"}


def test_mobilenet_v2_macs_at_224():
    report = lint("zoo:mobilenet_v2", NO_TARGETS)
    profile = report.profile
    assert profile.input_specs[0]["shape"] == [1, 3, 224, 224]
    assert abs(profile.total_macs - 300.8e6) / 300.8e6 < 0.01
    assert sum(r.macs for r in profile.rows) == profile.total_macs
    assert profile.total_params == 3_504_872
    # rows are what a backend runs as one kernel, dominating first: conv + its BN + its ReLU
    assert profile.rows[0].macs == max(r.macs for r in profile.rows)
    stem = next(r for r in profile.rows if r.module == "features.0.0")
    assert stem.members == ["features.0.0", "features.0.1", "features.0.2"] and stem.kind.endswith("+ BN + ReLU")
    assert stem.macs == 112 * 112 * 27 * 32 and stem.activation_bytes == 32 * 112 * 112 * 4


def test_mobilenet_v2_is_clean_for_xnnpack():
    report = lint("zoo:mobilenet_v2", LintConfig(targets=("xnnpack",)), input_specs=[InputSpec((1, 3, 64, 64))])
    xnn = report.target("xnnpack")
    assert (xnn.status, xnn.partitions, xnn.unsupported) == ("ok", 1, [])
    assert xnn.ops_supported == xnn.ops_total > 100
    assert report.warnings == []  # and nothing else to warn about: only dropout and requires-grad notes
    assert rules_of(report) == {"training-only", "requires-grad"}


class Cumsum(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = cbr(3, 16)
        self.mix = nn.Conv2d(16, 16, 1)
        self.head = Head(16)

    def forward(self, x):
        return self.head(self.mix(torch.cumsum(self.stem(x), dim=1)))


def test_op_xnnpack_cannot_take_is_named_with_its_partition_count():
    report = lint(frozen(Cumsum()), LintConfig(targets=("xnnpack", "nnapi")), input_specs=SMALL)
    assert rules_of(report) == {"target-support"}
    xnn = report.target("xnnpack")
    assert xnn.status == "partial" and xnn.partitions == 2
    assert [(u.op, u.count, u.modules) for u in xnn.unsupported] == [("aten.cumsum", 1, [""])]
    assert xnn.unsupported[0].location.startswith("test_lint.py:")
    (f,) = [f for f in report.findings if f.target == "xnnpack"]
    assert "aten.cumsum" in f.message and "2 partition(s)" in f.message and f.numbers["partitions"] == 2
    nnapi = report.target("nnapi")  # a whole-model converter: one refused op and NNAPI gets nothing
    assert nnapi.status == "failed" and nnapi.partitions == 0
    assert [u.op for u in nnapi.unsupported] == ["aten::cumsum"]


@pytest.mark.slow
def test_full_lowering_agrees_with_partitioning():
    lowered = lint(frozen(Cumsum()), LintConfig(targets=("xnnpack",), xnnpack_lower=True), input_specs=SMALL)
    xnn = lowered.target("xnnpack")
    assert xnn.how.endswith("lowered") and xnn.partitions == 2
    assert [u.op for u in xnn.unsupported] == ["aten.cumsum"]
    assert xnn.details["delegation"]["portable_by_op"] == {"aten.cumsum": 1}


def test_nnapi_names_the_inplace_relu_of_toy_classifier():
    report = lint("zoo:toy_classifier", LintConfig(targets=("nnapi",)), input_specs=[InputSpec((1, 3, 32, 32))])
    nnapi = report.target("nnapi")
    assert nnapi.status == "failed" and nnapi.partitions == 0
    (op,) = nnapi.unsupported
    assert op.op == "aten::relu_" and op.count == 16 and op.modules[0] == "features.2"
    assert "out-of-place" in op.fix


class NotTraceable(nn.Module):
    """Data-dependent control flow (FX cannot trace it), nested blocks, a functional matmul in its own forward."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
        self.blocks = nn.ModuleList([nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()) for _ in range(2)])
        self.proj = nn.Parameter(torch.randn(8, 16))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            if x.mean() > -1e9:  # data-dependent: torch.fx cannot trace this
                x = x + block(x)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1) @ self.proj
        return self.fc(x)


def test_profile_rows_of_a_model_fx_cannot_trace_partition_the_total():
    profile = lint(NotTraceable().eval(), NO_TARGETS, input_specs=SMALL).profile
    rows = {r.module: r.macs for r in profile.rows}
    assert sum(rows.values()) == profile.total_macs and not profile.notes, (rows, profile.total_macs)
    assert rows["(model) (ops)"] == 8 * 16  # only the matmul its own forward runs, not its children's MACs
    assert rows["stem.0"] == 30 * 30 * 8 * 27 and rows["fc"] == 16 * 10
    assert all(r.mac_share <= 1.0 for r in profile.rows)


@pytest.mark.parametrize("summary,names_line", [
    ("export failed at model.py:12 (torch.export): data-dependent branch", True),
    ("export failed: Could not guard on data-dependent expression Eq(u0, 1)", False),
])
def test_a_failed_export_fix_says_it_names_the_line_only_when_it_does(summary, names_line):
    from mobilize.lint.core import _target_findings
    from mobilize.lint.support import TargetSupport

    (finding,) = _target_findings(TargetSupport("xnnpack", "failed", "torch.export", summary=summary))
    assert ("the message names the line" in finding.fix) == names_line
    assert names_line or "names no source line" in finding.fix


class PaddedConvBN(nn.Module):
    """EfficientNet's pattern: a conv with string padding, then a BatchNorm."""

    def __init__(self, padding):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.bn, self.fc = nn.Conv2d(3, 8, 3, padding=padding), nn.BatchNorm2d(8), nn.Linear(8, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def test_nnapi_fix_names_string_padding_as_the_cause_of_the_unfolded_batchnorm():
    """Every BatchNorm here follows a conv; what stops NNAPI is the conv's padding='same' (aten::_convolution_mode),
    which also keeps the BatchNorm from folding.  Both fixes say so, and numeric padding converts."""
    report = lint(PaddedConvBN("same").eval(), LintConfig(targets=("nnapi",)), input_specs=SMALL)
    fixes = {u.op: u.fix for u in report.target("nnapi").unsupported}
    assert set(fixes) == {"aten::_convolution_mode", "aten::batch_norm"}, fixes
    assert "string padding" in fixes["aten::_convolution_mode"] and "numeric padding" in fixes["aten::_convolution_mode"]
    assert "string padding" in fixes["aten::batch_norm"] and "does not follow" not in fixes["aten::batch_norm"]
    fixed = lint(PaddedConvBN(1).eval(), LintConfig(targets=("nnapi",)), input_specs=SMALL)
    assert fixed.target("nnapi").unsupported == [] and fixed.target("nnapi").status != "failed"


@pytest.mark.slow
def test_litert_delegate_names_the_op_it_leaves_out():
    pytest.importorskip("litert_torch")
    report = lint(frozen(Cumsum()), LintConfig(targets=("litert",)), input_specs=SMALL)
    lit = report.target("litert")
    assert lit.status == "partial" and lit.partitions == 2
    assert [(u.op, u.modules) for u in lit.unsupported] == [("CUMSUM", [""])]


# -- output: JSON, CLI, HTML ---------------------------------------------------------------------------------
def test_cli_strict_exit_code_is_the_verdict(tmp_path, capsys):
    from mobilize.cli.main import main

    out = tmp_path / "lint.json"
    args = ["lint", "zoo:toy_classifier", "--input_dims", "1,3,32,32", "--target", "none", "--json", str(out)]
    assert main(args) == 0
    assert main(args + ["--strict"]) == 1
    err = capsys.readouterr().err
    assert "7 warning(s) fired; exit 1 because of --strict (the lint verdict, not an error)" in err
    data = json.loads(out.read_text())
    assert data["fired"] and data["counts"]["by_rule"]["channels"] == 7 and data["profile"]["total_macs"] > 0
    assert main(["lint", "zoo:toy_classifier", "--target", "tflite"]) == 2
    assert "unknown lint target 'tflite'" in capsys.readouterr().err


def test_html_fragment_is_self_contained():
    from mobilize.lint.html import render_fragment

    report = lint(frozen(nn.Sequential(cbr(3, 16), cbr(16, 20, 1), Head(20))), NO_TARGETS, input_specs=SMALL)
    section = summary_dict(report, top=3)
    assert len(section["profile"]["rows"]) == 3 and section["profile"]["rows_omitted"] > 0
    html = render_fragment(json.loads(json.dumps(section)))
    assert html.startswith('<section class="mobilize-lint"') and html.count("<svg") == 1
    assert "<script" not in html and "http" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert html.count("<rect") == 3 + 1  # one MAC bar per row, plus the legend
    assert "channels" in html and "1.0" in html


def test_profile_chart_labels_are_whole_or_distinct():
    """#40 item 13: a transformer's layer paths share a long start; cut at the end, 16-18 bars read the same."""
    import re

    from mobilize.lint.html import profile_chart

    names = [f"bert.encoder.layer.{k}.attention.{leaf}" for k in (10, 11) for leaf in
             ("self.query", "self.key", "self.value", "output.dense")]
    names += [f"model.decoder.layers.3.block.{'x' * 50}.{leaf}" for leaf in ("a", "b")]  # differ only at the end
    names += [f"m.{'y' * 40}.{k}.{'z' * 40}" for k in (1, 2)]  # differ only deep in the middle
    rows = [{"module": n, "kind": "Linear", "mac_share": 0.05} for n in names]
    svg = profile_chart({"rows": rows, "total_macs": 1e6})
    shown = re.findall(r'dominant-baseline="middle">([^<]*)<title>([^<]*)</title>', svg)
    assert len(shown) == len(names) and [full for _, full in shown] == [f"{n}  Linear" for n in names]
    assert len({text for text, _ in shown}) == len(names), [text for text, _ in shown]
    assert all(len(text) <= 60 for text, _ in shown)  # the label column widens to 60 characters, no further
    assert [text for text, _ in shown[:8]] == [f"{n}  Linear" for n in names[:8]]  # these fit whole
