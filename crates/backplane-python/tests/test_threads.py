"""One session, many Python threads: run releases the GIL, concurrent runs use their own
working memory, and every result equals the sequential one."""

from __future__ import annotations

import threading

import numpy as np

import backplane
from conftest import DIGITS, MODEL

THREADS = 8
RUNS = 60


def test_eight_threads_running_one_session_match_sequential_runs():
    images = np.load(DIGITS / "test_set.npy")
    session = backplane.InferenceSession(str(MODEL))
    # Several batch sizes, so that threads also load new specializations concurrently.
    sizes = [1, 2, 5, 8, 1, 3]

    def job(thread: int, run: int) -> np.ndarray:
        size = sizes[(thread + run) % len(sizes)]
        start = (thread * RUNS + run) % (len(images) - size)
        return images[start : start + size]

    expected = {
        (t, r): session.run(None, {"input": job(t, r)})[0] for t in range(THREADS) for r in range(RUNS)
    }
    fresh = backplane.InferenceSession(str(MODEL))
    results: dict[tuple[int, int], np.ndarray] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def worker(t: int) -> None:
        try:
            barrier.wait()
            for r in range(RUNS):
                (results[(t, r)],) = fresh.run(None, {"input": job(t, r)})
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == THREADS * RUNS
    for key, value in expected.items():
        np.testing.assert_array_equal(results[key], value, err_msg=f"thread {key[0]}, run {key[1]}")
    assert sorted(s["input_shapes"]["input"][0] for s in fresh.get_specializations()) == [1, 2, 3, 5, 8]

