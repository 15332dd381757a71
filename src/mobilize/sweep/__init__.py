"""``mobilize sweep``: compare many models with one plan, locally or on a Ray cluster, resumable."""

from mobilize.sweep.jobs import ModelEntry, ModelJob, ModelStatus, parse_models_text
from mobilize.sweep.runner import SweepConfig, sweep

__all__ = ["ModelEntry", "ModelJob", "ModelStatus", "SweepConfig", "parse_models_text", "sweep"]
