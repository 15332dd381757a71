"""Rules ``training-mode``, ``training-only`` and ``requires-grad``: training leftovers in an inference model.

- ``training-mode`` (warn): modules still in training mode.  BatchNorm then normalizes with the
  batch's own statistics (batch-size-dependent outputs, nothing to fold) and dropout zeroes
  activations at random.
- ``training-only`` (warn for observers and fake-quant modules, which run and cost time; info for
  dropout in eval mode, a no-op that torch.export and ONNX drop but TorchScript keeps as a call).
- ``requires-grad`` (info): parameters that require grad; inference outside ``torch.no_grad`` /
  ``inference_mode`` then records autograd history (memory and time).  One finding for the model.
"""

from __future__ import annotations

from torch import nn

from mobilize.lint.graph import BNS, ModelView
from mobilize.lint.report import Finding, Rule, Severity

_DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


def _quant_machinery() -> tuple[type, ...]:
    from torch.ao.quantization import FakeQuantizeBase
    from torch.ao.quantization.observer import ObserverBase

    return FakeQuantizeBase, ObserverBase


def check(view: ModelView) -> list[Finding]:
    return _training_mode(view) + _training_only(view) + _requires_grad(view)


def _training_mode(view: ModelView) -> list[Finding]:
    if view.module.training:
        behaving = [p for p, m in view.modules.items() if isinstance(m, BNS + _DROPOUTS) and m.training]
        return [Finding(Rule.TRAINING_MODE, Severity.WARN, "",
                        f"the model is in training mode: {len(behaving)} BatchNorm/dropout module(s) behave as in "
                        f"training (batch statistics, random zeroing)",
                        "call model.eval() before exporting or measuring", {"modules": behaving})]
    findings = []
    for path, m in view.modules.items():
        if m.training and isinstance(m, BNS):
            findings.append(Finding(Rule.TRAINING_MODE, Severity.WARN, path,
                                    f"{type(m).__name__} is in training mode inside an eval model: it normalizes with "
                                    f"each batch's statistics (outputs depend on the batch; nothing to fold)",
                                    "call .eval() on it (or on the whole model) after any .train()", {}))
        elif m.training and isinstance(m, _DROPOUTS) and m.p > 0:
            findings.append(Finding(Rule.TRAINING_MODE, Severity.WARN, path,
                                    f"{type(m).__name__}(p={m.p}) is in training mode inside an eval model: it zeroes "
                                    f"activations at random", "call .eval() on it (or on the whole model)", {"p": m.p}))
    return findings


def _training_only(view: ModelView) -> list[Finding]:
    fake_quant, observer = _quant_machinery()
    findings = []
    for path, m in view.modules.items():
        if isinstance(m, (fake_quant, observer)):
            if isinstance(m, observer) and isinstance(view.modules.get(path.rpartition(".")[0]), fake_quant):
                continue  # the observer inside a fake-quant module: reported with its parent
            findings.append(Finding(Rule.TRAINING_ONLY, Severity.WARN, path,
                                    f"{type(m).__name__} left from quantization preparation (QAT or calibration): it "
                                    f"runs on every inference", "convert the model (torch.ao.quantization.convert / "
                                    "convert_pt2e) or rebuild it without the observers", {"kind": type(m).__name__}))
        elif isinstance(m, _DROPOUTS) and not m.training and view.calls(path):
            findings.append(Finding(Rule.TRAINING_ONLY, Severity.INFO, path,
                                    f"{type(m).__name__}(p={m.p}) is a no-op at inference: torch.export and ONNX drop it, "
                                    f"TorchScript and the lite interpreter keep the call",
                                    "nothing needed for .pte/.onnx; replace with nn.Identity() for TorchScript files",
                                    {"p": m.p}))
    for node in view.nodes:
        if node.op == "call_function" and view.op_name(node) in ("dropout", "dropout1d", "dropout2d", "alpha_dropout",
                                                                 "feature_alpha_dropout"):
            training = node.kwargs.get("training", node.args[2] if len(node.args) > 2 else True)
            findings.append(Finding(
                Rule.TRAINING_MODE if training is True else Rule.TRAINING_ONLY,
                Severity.WARN if training is True else Severity.INFO, view.owner(node),
                "F.dropout(..., training=True) zeroes activations at inference too" if training is True else
                "F.dropout call in forward: a no-op at inference, kept as a call by TorchScript",
                "pass training=self.training, or use an nn.Dropout module" if training is True else
                "nothing needed for .pte/.onnx", {"training": training if isinstance(training, bool) else None},
                location=view.location(node)))
    return findings


def _requires_grad(view: ModelView) -> list[Finding]:
    params = [(n, p) for n, p in view.module.named_parameters() if p.requires_grad]
    if not params:
        return []
    count = sum(p.numel() for _, p in params)
    return [Finding(Rule.REQUIRES_GRAD, Severity.INFO, "",
                    f"{len(params)} parameter tensor(s) ({count:,} values) require grad: inference outside "
                    f"torch.no_grad()/inference_mode() records autograd history",
                    "call model.requires_grad_(False) for deployment (mobilize's exporters run under no_grad)",
                    {"tensors": len(params), "values": count})]
