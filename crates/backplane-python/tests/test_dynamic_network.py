"""backplane.DynamicNetwork: one loaded model run on differently shaped inputs, its plan
cache's counts, and data-dependent shapes, from Python."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import backplane

from conftest import REPO

BERT = REPO / "testdata" / "dynamic" / "bert_tiny.onnx"
DATA_DEPENDENT = REPO / "testdata" / "dynamic" / "data_dependent.onnx"


def ids(seq: int) -> np.ndarray:
    """Token ids ``[1, seq]``, different for every length."""
    return ((np.arange(seq) * 7 + seq) % 64).astype(np.int64).reshape(1, seq)


def test_one_network_serves_every_sequence_length_and_counts_its_plans():
    net = backplane.DynamicNetwork(str(BERT))
    assert net.signature()["inputs"] == {"input_ids": ["batch", "seq"]}
    assert net.kept_weight_bytes() > 0  # the model's weights, until the first import
    # The reference: a session specialised per shape (a separate import for each).
    session = backplane.InferenceSession(str(BERT))
    for seq in [7, 16, 33, 7]:
        (hidden,) = net.run(None, {"input_ids": ids(seq)})
        (want,) = session.run(None, {"input_ids": ids(seq)})
        assert hidden.shape == (1, seq, 96)
        assert hidden.dtype == np.float32
        np.testing.assert_allclose(hidden, want, rtol=1e-5, atol=1e-5)
    stats = net.stats()
    assert stats["bytes"] > 0  # the plans' working memory
    assert stats == {
        "size": 3,
        "capacity": 8,
        "networks": 1,
        "hits": 1,
        "misses": 3,
        "evictions": 0,
        "bytes": stats["bytes"],
        # 16 and 33 had 7's structure: each replayed its optimization (re-shaped), none
        # was refused.
        "optimizer_runs": 1,
        "plans_reshaped": 2,
        "same_structure": 0,
        "same_decisions": 0,
    }
    # The first import shared the weights: later imports copy none of them.
    assert net.kept_weight_bytes() == 0
    assert net.cuts() == []
    assert "3 plans cached" in repr(net)


def test_a_batch_of_two_is_another_plan():
    net = backplane.DynamicNetwork(BERT)
    batch = np.concatenate([ids(5), ids(5)[:, ::-1]])
    (hidden,) = net.run(["hidden"], {"input_ids": batch})
    (first,) = net.run(["hidden"], {"input_ids": batch[:1]})
    assert hidden.shape == (2, 5, 96)
    # Rows are independent: the batch's first row equals the same row run alone.
    np.testing.assert_allclose(hidden[:1], first, rtol=1e-5, atol=1e-5)
    assert net.stats()["misses"] == 2


def test_the_cache_keeps_at_most_capacity_plans():
    net = backplane.DynamicNetwork(BERT.read_bytes(), capacity=2)
    for seq in [3, 4, 5, 3]:
        net.run(None, {"input_ids": ids(seq)})
    stats = net.stats()
    assert stats["size"] == 2
    assert stats["capacity"] == 2
    assert stats["misses"] == 4  # seq 3 was evicted by seq 5, then built again
    assert stats["evictions"] == 2


def test_max_memory_bounds_the_plans_held():
    probe = backplane.DynamicNetwork(BERT)
    probe.run(None, {"input_ids": ids(16)})
    one = probe.stats()["bytes"]
    assert one > 0
    # Room for one plan of seq 16 and a little more, not for two: the capacity (8) is not
    # what evicts, the budget is.
    net = backplane.DynamicNetwork(BERT, max_memory=one + one // 4)
    for seq in [16, 15, 16]:
        (hidden,) = net.run(None, {"input_ids": ids(seq)})
        assert hidden.shape == (1, seq, 96)
        stats = net.stats()
        assert stats["size"] == 1, (seq, stats)
        assert stats["bytes"] <= one + one // 4, (seq, stats)
    assert net.stats()["evictions"] == 2
    assert net.stats()["misses"] == 3


def test_the_network_keeps_its_runtime_alive():
    def make():
        return backplane.DynamicNetwork(str(BERT), providers=["CpuRef"])

    net = make()
    gc.collect()
    (hidden,) = net.run(None, {"input_ids": ids(4)})
    assert hidden.shape == (1, 4, 96)
    assert np.isfinite(hidden).all()


def test_threads_share_one_network():
    net = backplane.DynamicNetwork(str(BERT))
    want = {seq: net.run(None, {"input_ids": ids(seq)})[0] for seq in (6, 9)}
    failures: list[str] = []

    def work(seq: int) -> None:
        for _ in range(3):
            (got,) = net.run(None, {"input_ids": ids(seq)})
            if not np.array_equal(got, want[seq]):
                failures.append(f"seq {seq} differs")

    threads = [threading.Thread(target=work, args=(s,)) for s in (6, 9, 6, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert net.stats()["misses"] == 2
    assert net.stats()["hits"] == 12


def test_shapes_that_do_not_fit_the_signature_are_refused():
    net = backplane.DynamicNetwork(str(DATA_DEPENDENT))
    logits = np.zeros((1, 21), np.float32)  # declared [1, 20]
    boxes = np.zeros((1, 20, 4), np.float32)
    with pytest.raises(backplane.InvalidArgument, match="signature"):
        net.run(None, {"logits": logits, "boxes": boxes})
    with pytest.raises(backplane.InvalidArgument, match="'boxes' .* missing"):
        net.run(None, {"logits": logits[:, :20]})
    with pytest.raises(backplane.InvalidArgument, match="must be tensor\\(float\\)"):
        net.run(None, {"logits": logits[:, :20].astype(np.float64), "boxes": boxes})
    with pytest.raises(backplane.InvalidArgument, match="not an output"):
        net.run(["nope"], {"logits": logits[:, :20], "boxes": boxes})
    assert net.stats()["misses"] == 0


def test_data_dependent_shapes_match_onnx_runtime_outputs():
    net = backplane.DynamicNetwork(str(DATA_DEPENDENT))
    names = ["det_boxes", "det_scores", "det_rank"]
    for case in ["a", "b", "a"]:
        folder = REPO / "testdata" / "dynamic" / "data_dependent" / case
        feed = {n: np.load(folder / f"{n}.npy") for n in ("logits", "boxes")}
        got = net.run(names, feed)
        # The expected outputs were written by ONNX Runtime (scripts/gen_dynamic_models.py).
        for name, value in zip(names, got):
            want = np.load(folder / f"{name}.npy")
            assert value.shape == want.shape, name
            assert value.dtype == want.dtype, name
            np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-5, err_msg=name)
    assert [c["op_type"] for c in net.cuts()][:1] == ["NonZero"]
    total = net.total_stats()
    assert total["networks"] > 1
    assert total["hits"] >= 1
    assert net.stats()["misses"] == 1  # the part before the cut has fixed shapes
    # The cut nodes' imports: sets a and b imported them, a again found its entries.
    own = net.node_stats()
    assert own["capacity_per_node"] == 8
    assert own["misses"] >= 2 and own["hits"] >= 1
    nodes = net.total_node_stats()
    assert nodes["misses"] >= own["misses"] and nodes["hits"] >= own["hits"]
    assert nodes["size"] >= 1 and nodes["bytes"] > 0


def test_later_shapes_replay_the_support_answers_that_hold_at_every_shape():
    net = backplane.DynamicNetwork(str(BERT))
    net.run(None, {"input_ids": ids(7)})
    first = net.support_queries()
    assert first is not None
    assert first["asked"] > 0 and first["replayed"] == 0 and first["kept"] > 0
    for seq in [16, 33]:
        net.run(None, {"input_ids": ids(seq)})
    later = net.support_queries()
    # The kept answers are given again for the two other shapes, not asked; the answers a
    # backend ties to the shape (CpuAcc's fused layers) are asked again.
    assert later["kept"] == first["kept"]
    assert later["replayed"] >= 2 * first["kept"]
    assert later["asked"] < 3 * first["asked"]


def test_runtime_stats_total_every_cache_of_the_network():
    net = backplane.DynamicNetwork(str(DATA_DEPENDENT))
    folder = REPO / "testdata" / "dynamic" / "data_dependent" / "a"
    feed = {n: np.load(folder / f"{n}.npy") for n in ("logits", "boxes")}
    for _ in range(2):
        net.run(None, feed)
    totals = net.runtime_stats()
    plans, nodes = net.total_stats(), net.total_node_stats()
    # The network, and the two nested ones serving the rest after its cuts.
    assert totals["networks"] == plans["networks"] == 3
    assert totals["plans"] == {
        "entries": plans["size"],
        "bytes": plans["bytes"],
        "hits": plans["hits"],
        "misses": 3,
        "evictions": 0,
    }
    assert totals["nodes"] == {
        "entries": nodes["size"],
        "bytes": nodes["bytes"],
        "hits": nodes["hits"],
        "misses": 2,
        "evictions": 0,
    }
    assert totals["optimizer_runs"] == plans["optimizer_runs"]
    assert totals["plans_reshaped"] == plans["plans_reshaped"]
    assert totals["held_bytes"] == plans["bytes"] + nodes["bytes"]


def test_a_loop_ending_on_its_condition_runs_from_python():
    net = backplane.DynamicNetwork(str(REPO / "testdata" / "dynamic" / "loop_early_exit.onnx"))
    for case, length in [("a", 3), ("b", 5), ("c", 1)]:
        folder = REPO / "testdata" / "dynamic" / "loop_early_exit" / case
        feed = {n: np.load(folder / f"{n}.npy") for n in ("x", "limit")}
        total, sums, doubled = net.run(None, feed)
        assert sums.shape == (length,)
        # The expected outputs were written by ONNX Runtime (scripts/gen_dynamic_models.py).
        for name, value in [("total", total), ("sums", sums), ("doubled", doubled)]:
            np.testing.assert_allclose(value, np.load(folder / f"{name}.npy"), err_msg=name)
    assert net.cuts() == [{"node": "loop", "op_type": "Loop"}]
