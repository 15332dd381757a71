"""Every JSON file mobilize writes is strict JSON (RFC 8259): no bare ``NaN`` or ``Infinity``, which other
readers (JavaScript, jq, Go, Rust) refuse.  Two ways to get there, chosen at each writer:

* :func:`dumps`: settings and records (manifests, recipes, requests, indexes): a non-finite number there has no
  meaning, the inputs that could carry one are refused where they are read (``--input sr=nan``), so one reaching
  here is a bug in mobilize: an InternalError that names where in the document it is.
* :func:`dumps_measured`: reports of measurements (report.json, bench, tune, lint, verify): a measure that came
  out NaN or infinite (a speed-up interval with no upper bound, a figure of a NaN output) has no number JSON can
  hold; it is written as null, which the reports read as "not known", and the text beside it says why.

    >>> dumps_measured({"p50_ms": 1.5, "upper": float("inf")})
    '{"p50_ms": 1.5, "upper": null}'
    >>> dumps({"bound_args": {"sr": float("nan")}}, what="the manifest")
    Traceback (most recent call last):
    mobilize.core.errors.InternalError: the manifest holds nan at bound_args.sr, which JSON cannot hold
"""

from __future__ import annotations

import json
import math
from typing import Any

from mobilize.core.errors import InternalError


def dumps(value: Any, *, what: str = "a JSON file", **kwargs: Any) -> str:
    """``json.dumps(value, allow_nan=False, **kwargs)``; a non-finite number is an InternalError naming its place."""
    try:
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError:
        where = _first_non_finite(value)
        if where is None:
            raise
        path, number = where
        raise InternalError(f"{what} holds {number} at {path or 'its top'}, which JSON cannot hold") from None


def dumps_measured(value: Any, **kwargs: Any) -> str:
    """A report's JSON: every non-finite number written as null (a measure with no finite value is not known)."""
    return json.dumps(finite_or_null(value), allow_nan=False, **kwargs)


def finite_or_null(value: Any) -> Any:
    """``value`` with every NaN or infinite float (inside dicts, lists and tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(v) for v in value]
    return value


def _first_non_finite(value: Any, path: str = "") -> tuple[str, float] | None:
    if isinstance(value, float) and not math.isfinite(value):
        return path, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        found = _first_non_finite(item, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}".lstrip("."))
        if found:
            return found
    return None
