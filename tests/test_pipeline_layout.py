"""Megatron-Core's pipeline_model_parallel_layout grammar (scaletax.inputs.pipeline_layout)."""
import numpy as np
import pytest

from scaletax.inputs import pipeline_layout as P


def test_megatron_docstring_example():
    # megatron-core 0.19.2 pipeline_parallel_layer_layout.py:285-286: "Ettt|(tt|)*29,m|L" is
    # [["E","t","t","t"]] + [["t","t"]] * 29 + [["m"], ["L"]]
    assert P.expand("Ettt|(tt|)*29,m|L") == ["Ettt"] + ["tt"] * 29 + ["m", "L"]
    assert P.expand("Et*3|(tt|)*29m|L") == P.expand("Ettt|(tt|)*29,m|L")


@pytest.mark.parametrize("text, stages", [
    # the unrolling examples of parse_str_to_list's comments (lines 293-296), in layer characters
    ("Et(tt|t|)*2,tL", ["Ettt", "t", "tt", "t", "tL"]),     # xy(ab|cd|ef)*2,pq -> xyab|cd|efab|cd|efpq
    ("E(tt)*3|L", ["Etttttt", "L"]),                        # (ab)*3 -> ababab
    ("Et,(tt|)*2L", ["Ettt", "tt", "L"]),                   # ab,(cd|)*2 -> abcd|cd|
    ("E(|tt)*2,tL", ["E", "tt", "tttL"]),                   # (|ab)*2,cd -> |ab|abcd
    ("Et*0|L", ["E", "L"]),                                 # x*0 is nothing
])
def test_unrolling_as_megatron(text, stages):
    assert P.expand(text) == stages


def test_ranks_and_virtual_stages():
    # stage i = a * pp + b is virtual stage a of rank b (lines 47-54): the Megatron-Bridge 0.6.2
    # DeepSeek-V3 H100 recipe's layout on PP8 (perf_recipes/deepseek/h100/deepseek_v3.py)
    lay = P.parse("Et|(tt|)*30mL", 8, layers=61)
    assert (lay.pp, lay.vp) == (8, 4)
    assert lay.rank_layers().tolist() == [7, 8, 8, 8, 8, 8, 8, 6]
    assert lay.rank_layers("L").tolist() == [0] * 7 + [1]
    assert lay.rank_layers("E").tolist() == [1] + [0] * 7
    assert lay.rank_layers("m").tolist() == [0] * 7 + [1]
    assert lay.counts[7, 3].tolist() == [0, 0, 1, 1]  # the last stage: MTP and loss
    assert P.parse("Et*3|(tt|)*29m|L", 16, layers=61, vp=2).rank_layers().tolist() == [5] + [4] * 13 + [2, 2]


@pytest.mark.parametrize("text, pp, kw, message", [
    ("Etx|L", 2, {}, "invalid layer character 'x' in stage 0 ('Etx'); known: E embedding, t transformer layer, "
                     "m MTP layer, L loss"),
    ("Et|tt|L", 2, {}, "3 stages (the '|'-separated parts) are not a multiple of pp=2"),
    ("Et|tL", 2, {"vp": 2}, "2 stages on pp=2 make vp=1, but the row's vp is 2 (leave vp blank to take the layout's)"),
    ("tE|tL", 2, {}, "the first layer must be E (embedding), got 't'"),
    ("Et|Lt", 2, {}, "the last layer must be L (loss), got 't'"),
    ("Et|EtL", 2, {}, "E (embedding) must appear exactly once (got 2)"),
    ("Et|tL", 2, {"layers": 3}, "places 2 transformer layers (t); the model has 3"),
    ("Em|tL", 2, {}, "transformer layers (t) must come before every MTP layer (m)"),
    ("Et|tm|t|L", 2, {}, "transformer layers (t) must come before every MTP layer (m)"),
    ("Et|m|t|L", 2, {"layers": 2}, "transformer layers (t) must come before every MTP layer (m)"),
    ("Et|tm|L|t", 2, {}, "the last layer must be L (loss), got 't'"),
    ("Et|t|m|mL", 2, {}, "all MTP layers (m) must be in one virtual stage"),
    ("E(t)*99999999|L", 2, {}, "expands to more than 100,000 characters"),
    ("E" + "t" * 5000 + "|L", 2, {}, "longer than 4096 characters (5003)"),
])
def test_refused_with_one_line(text, pp, kw, message):
    with pytest.raises(P.LayoutError) as exc:
        P.parse(text, pp, **kw)
    assert str(exc.value) == message


def test_mtp_only_in_a_ranks_last_virtual_stage():
    # Megatron-Core lines 120-126: MTP in an earlier virtual stage of a rank is refused
    # (rank 1 holds stages 1 and 3: "m" is its first virtual stage)
    with pytest.raises(P.LayoutError) as exc:
        P.parse("Ett|m||L", 2, layers=2)
    assert str(exc.value) == "MTP layers (m) must be in the last virtual stage of their pipeline rank"
    assert P.parse("Ett||m|L", 2, layers=2).rank_layers("m").tolist() == [1, 0]


def test_is_layout():
    assert P.is_layout("Et|tL") and P.is_layout("E(tt)*2L")
    assert not any(P.is_layout(v) for v in ("auto", "even", "account", "balanced", ""))


def test_counts_sum_to_the_text():
    lay = P.parse("Et*4|(t*7|)*5t*8|tmL", 8, layers=48)  # Megatron-Bridge 0.6.2 Qwen3-30B-A3B GB300
    assert lay.counts.sum(axis=(0, 1)).tolist() == [1, 48, 1, 1]
    assert np.array_equal(lay.rank_layers(), [4, 7, 7, 7, 7, 7, 8, 1])
