"""What a sweep runs: one ModelJob per model line, and the ModelEntry its compare ends in.

A models file has one model per line, optionally with its own ``--input_dims`` and ``--variant``
(``#`` starts a comment):

    >>> jobs = parse_models_text("zoo:conv_bn_relu\\nzoo:toy_classifier --input_dims 1,3,32,32  # small\\n")
    >>> [(j.reference, j.input_dims, j.stem) for j in assign_stems(jobs)]
    [('zoo:conv_bn_relu', None, 'conv_bn_relu'), ('zoo:toy_classifier', '1,3,32,32', 'toy_classifier')]
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import shlex
from typing import Any

from mobilize.core.errors import ConfigError


class ModelStatus(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    DONE = "DONE"
    """compare finished; its variants' outcomes are in the entry (they may include failures)."""
    FAILED = "FAILED"
    """compare itself failed for this model (the float reference, a bad input, a crash): an outcome of the
    model, not a failed sweep."""
    INTERRUPTED = "INTERRUPTED"
    """The sweep was stopped while this model was in flight; ``--resume`` redoes it."""

    @property
    def is_result(self) -> bool:
        """A result ``--resume`` keeps (a failure of the model itself is a result too)."""
        return self in (ModelStatus.DONE, ModelStatus.FAILED)


@dataclasses.dataclass(frozen=True)
class ModelJob:
    reference: str
    input_dims: str | None = None
    """``--input_dims`` for this model (None: the model's own input shape)."""
    variants: tuple[str, ...] = ()
    """Only these variants of the plan (empty: all)."""
    stem: str = ""
    """The folder under the sweep's output that holds this model's report (unique within the sweep)."""
    input_type: str | None = None
    """``--input_type`` for this model (None: float)."""

    def to_json(self) -> dict[str, Any]:
        data = {"reference": self.reference, "input_dims": self.input_dims, "variants": list(self.variants)}
        return {**data, "input_type": self.input_type} if self.input_type else data


def parse_model_line(line: str, defaults: ModelJob = ModelJob("")) -> ModelJob | None:
    text = line.split("#", 1)[0].strip()
    if not text:
        return None
    parser = argparse.ArgumentParser(prog="models-file", add_help=False, exit_on_error=False)
    parser.add_argument("reference")
    parser.add_argument("--input_dims", "--input-dims", dest="input_dims")
    parser.add_argument("--input_type", "--input-type", dest="input_type")
    parser.add_argument("--variant", action="append", default=[])
    try:
        args, extra = parser.parse_known_args(shlex.split(text))
    except (argparse.ArgumentError, ValueError) as exc:
        raise ConfigError(f"bad model line '{text}': {exc}") from None
    if extra:
        raise ConfigError(f"model line '{text}' has unknown option(s): {' '.join(extra)}",
                          hint="a line is MODEL [--input_dims D] [--input_type T] [--variant NAME ...]")
    return ModelJob(args.reference, args.input_dims or defaults.input_dims,
                    tuple(args.variant) or defaults.variants, input_type=args.input_type or defaults.input_type)


def parse_models_text(text: str, defaults: ModelJob = ModelJob("")) -> list[ModelJob]:
    return [job for line in text.splitlines() if (job := parse_model_line(line, defaults)) is not None]


def assign_stems(jobs: list[ModelJob]) -> list[ModelJob]:
    """Give each job a unique folder name: the model's stem, then -2, -3 ... for repeats."""
    from mobilize.core.paths import model_stem

    seen: dict[str, int] = {}
    out = []
    for job in jobs:
        stem = model_stem(job.reference)
        seen[stem] = seen.get(stem, 0) + 1
        out.append(dataclasses.replace(job, stem=stem if seen[stem] == 1 else f"{stem}-{seen[stem]}"))
    return out


@dataclasses.dataclass
class ModelEntry:
    """One model's line in the index: its compare's summary, where it ran, and how often it was tried."""

    model: str
    stem: str
    job: dict[str, Any]
    work_key: str
    """Hash of (model, input dims, variants, plan, data, compare settings): what was asked."""
    status: ModelStatus = ModelStatus.PENDING
    error: str | None = None
    fingerprint: dict[str, Any] | None = None
    """Where the timings were taken (see fingerprint.py); None until the model ran."""
    node: str | None = None
    attempts: int = 0
    retries: list[str] = dataclasses.field(default_factory=list)
    """One line per retried attempt: why the previous attempt was lost and where it ran."""
    recommended: dict[str, Any] | None = None
    speedup: dict[str, Any] | None = None
    """The recommended variant's speed-up against the plan's reference variant (same run, same machine)."""
    top1_drop: float | None = None
    cosine_mean: float | None = None
    outcome_counts: dict[str, int] = dataclasses.field(default_factory=dict)
    report: str | None = None
    """The model's report.html, relative to the sweep folder."""
    duration_s: float | None = None

    @property
    def key(self) -> str:
        """The resume key: what was asked plus where (and with which versions) it was measured."""
        from mobilize.sweep.fingerprint import digest

        return digest({"work": self.work_key, "fingerprint": self.fingerprint})

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["status"] = str(self.status)
        data["key"] = self.key if self.fingerprint else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ModelEntry":
        fields = {f.name for f in dataclasses.fields(cls)}
        entry = cls(**{k: v for k, v in data.items() if k in fields})
        entry.status = ModelStatus(entry.status)
        return entry

    def fill_from_report(self, report: dict[str, Any]) -> None:
        """The summary the index shows, taken from the model's own compare report."""
        counts: dict[str, int] = {}
        for v in report.get("variants", []):
            counts[v["outcome"]] = counts.get(v["outcome"], 0) + 1
        self.outcome_counts = counts
        rec = report.get("recommended")
        self.recommended = {k: rec.get(k) for k in ("name", "reason", "tied")} if rec else None
        if rec:
            chosen = next((v for v in report["variants"] if v["name"] == rec["name"]), {})
            self.speedup = chosen.get("speedup")
            acc = chosen.get("accuracy") or {}
            self.top1_drop = acc.get("top1_drop")
            self.cosine_mean = acc.get("cosine")
        if not report.get("complete", True):
            self.status = ModelStatus.INTERRUPTED
