"""tune's thread-count line compares the counts it measured: never 1 thread with itself."""

from mobilize.tune import timing


def _line(monkeypatch, medians: dict[str, list[float]], cores: int) -> str:
    monkeypatch.setattr(timing, "_rounds", lambda runs, sample, rounds, iterations: medians)
    return timing.best_threads("model.onnx", [], cores, 5, 10)["line"]


def test_one_thread_best_is_compared_with_the_count_it_beat(monkeypatch):
    line = _line(monkeypatch, {"1": [1.0, 1.01, 0.99, 1.0, 1.02], "2": [1.3, 1.32, 1.28, 1.31, 1.3]}, 2)
    assert line.startswith("best thread count: 1 of 1-2") and "2 threads 0.7" in line and "slower" in line
    assert "as fast as 1, 95% CI" in line and "1 thread(s) 1.00x as fast as 1" not in line


def test_one_thread_within_noise_of_two(monkeypatch):
    line = _line(monkeypatch, {"1": [1.0, 1.2, 0.9, 1.1, 1.0], "2": [0.98, 1.15, 0.93, 1.05, 1.01]}, 2)
    assert line.startswith("best thread count: 1 of 1-2") and "within noise" in line


def test_a_single_core_machine_says_so(monkeypatch):
    assert "one core" in _line(monkeypatch, {"1": [1.0, 1.0, 1.0]}, 1)
