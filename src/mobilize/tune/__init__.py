"""``mobilize tune``: the fastest artifact within an accuracy budget.

The search builds every candidate recipe (each searched runtime's route,
:class:`mobilize.core.tune_route.TuneRoute`, declared in the engine's folder: ONNX fp32; ONNX static int8 with
MinMax, Entropy and Percentile calibration; ExecuTorch and LiteRT fp32 and int8 when asked for), checks each against the float
model on real samples with the verify core (:func:`mobilize.accuracy.verify.assess`, as compare judges, with
the user's :class:`~mobilize.accuracy.verify.Policy`), and when an ONNX int8 candidate misses
the budget it localises the layers that cost accuracy (:mod:`mobilize.backends.onnxruntime.drift`) and keeps
the worst of them in float, one more at a time, until the budget holds; the same for ExecuTorch
int8 (:mod:`mobilize.backends.executorch.drift`, the modules named in the executorch step's ``exclude``).  Every candidate within
budget is then timed in interleaved rounds (:func:`mobilize.bench.rounds.schedule`); the winner is
the lowest geometric mean of its round medians, and its lead over the runner-up is tested on the paired round
medians (:func:`mobilize.accuracy.stats.ratio_ci`, the same estimator): when the interval contains 1.0 the report
names the tie (:mod:`mobilize.tune.timing`, which also finds the best thread count for the winner).  With
``prune`` levels, structured pruning with a distilled fine-tune joins the search (:mod:`mobilize.tune.prune`);
where mobilize departs from ONNX Runtime's default for the target CPU it measures the default beside it
(:mod:`mobilize.tune.stock`).

Built artifacts are cached by the hash of their recipe, so a recipe reached twice is built once.
Ctrl-C (or the time budget) stops the search and keeps the best found so far.

The modules: :mod:`~mobilize.tune.run` (``tune()``), :mod:`~mobilize.tune.routes` (the runtimes searched),
:mod:`~mobilize.tune.candidates`, :mod:`~mobilize.tune.search` (build and judge one candidate),
:mod:`~mobilize.tune.exclude`, :mod:`~mobilize.tune.stock`, :mod:`~mobilize.tune.timing`,
:mod:`~mobilize.tune.explain` and :mod:`~mobilize.tune.why`, :mod:`~mobilize.tune.prune`,
:mod:`~mobilize.tune.result`.
"""

from mobilize.tune.candidates import (Candidate, candidate_recipes, export_recipe, onnx_recipe, prune_key,
                                      recipe_hash)
from mobilize.tune.exclude import DRIFT_SAMPLES, MAX_EXCLUSIONS
from mobilize.tune.result import TuneResult, format_layers
from mobilize.tune.routes import route, runtimes
from mobilize.tune.run import EVAL_SAMPLES, ITERATIONS, ROUNDS, tune

__all__ = ["Candidate", "DRIFT_SAMPLES", "EVAL_SAMPLES", "ITERATIONS", "MAX_EXCLUSIONS", "ROUNDS", "TuneResult",
           "candidate_recipes", "export_recipe", "format_layers", "onnx_recipe", "prune_key", "recipe_hash", "route",
           "runtimes", "tune"]
