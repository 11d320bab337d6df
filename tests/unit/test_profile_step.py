"""benchmarks/profile_real_lm_step.py's split of a profiled step into kinds of work (synthetic trace events)."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def prof():
    spec = importlib.util.spec_from_file_location(
        "profile_real_lm_step", ROOT / "benchmarks" / "profile_real_lm_step.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ev(name, ts, dur):
    return {"name": name, "ts": ts, "dur": dur}


def test_each_op_own_time_goes_to_one_kind_and_labels_are_not_ops(prof):
    events = [
        ev("aten::linear", 0, 100), ev("aten::mm", 10, 80),  # linear's own 20 us: other; mm 80
        ev("autograd::engine::evaluate_function: EmbeddingBackward0", 200, 50), ev("aten::zero_", 205, 30),
        ev("optimizer", 300, 100), ev("aten::mul_", 310, 40), ev("aten::sqrt", 360, 20),  # 20 us of Python
        ev("aten::_log_softmax", 500, 10), ev("aten::_scaled_dot_product_flash_attention_for_cpu", 600, 7),
    ]  # fmt: skip
    out = prof.breakdown(events)
    own = {k: round(v * 1e6) for k, v in out["own_seconds"].items() if round(v * 1e6)}
    assert own == {"matrix products": 80, "other torch ops": 20, "embedding backward": 50, "optimizer": 60,
                   "vocabulary softmax": 10, "attention": 7}  # fmt: skip
    assert round(out["covered_seconds"] * 1e6) == 100 + 50 + 40 + 20 + 10 + 7  # the optimizer label covers nothing
    assert set(out["other_ops"]) == {"aten::linear"}


def test_kind_follows_the_ancestors(prof):
    assert prof.kind_of("aten::mm", ("optimizer",)) == "optimizer"
    assert prof.kind_of("aten::mm", ("autograd::engine::evaluate_function: MmBackward0",)) == "matrix products"
    assert (
        prof.kind_of("aten::fill_", ("autograd::engine::evaluate_function: GatherBackward0",)) == "vocabulary softmax"
    )
    assert prof.kind_of("aten::zero_", ("aten::scaled_dot_product_attention",)) == "attention"
    assert prof.kind_of("aten::cat", ()) == "other torch ops"
