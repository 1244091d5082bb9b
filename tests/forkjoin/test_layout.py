"""The trie layout of a fork-join trace, by hand: which token sees which, its positions, the loss mask, and the
rows that are not a layout (they stay causal)."""

from rlm_lab.forkjoin.layout import PREFIX, Segments, Tags, completion, loss_mask, plan

# a toy vocabulary: < > : ; EOS are 100..104, labels 1 2, everything else digits
T = Tags(open=100, close=101, colon=102, semi=103, eos=104)
SEG = Segments(outline=(100, 1, 2, 101), headers=((1, 102), (2, 102)), bodies=((7, 8, 103), (9, 103)),
               join=(5, 6, 104))
PROMPT = [40, 41, 42]


def test_completion_and_loss_mask_by_hand():
    leaves = [1, 102, 7, 8, 103, 2, 102, 9, 103]
    assert completion(SEG) == [100, 1, 2, 101, *leaves, *leaves, 5, 6, 104]
    assert loss_mask(SEG) == [1, 1, 1, 1] + [0, 0, 1, 1, 1, 0, 0, 1, 1] + [0] * 9 + [1, 1, 1]
    assert SEG.work == 4 + 5 + 3 and SEG.depth == 4 + 3 + 3
    assert SEG.trace() == [100, 1, 2, 101, *leaves, 5, 6, 104]


def test_plan_by_hand():
    row = PROMPT + completion(SEG)
    p = plan(row, T)
    n0 = 3 + 4  # prompt + outline
    assert p.segment == (PREFIX,) * n0 + (1,) * 5 + (2,) * 4 + (3,) * (9 + 3)
    assert p.position == (*range(n0), *range(n0, n0 + 5), *range(n0, n0 + 4), *range(n0, n0 + 12))
    leaf2 = n0 + 5
    assert p.sees(leaf2, n0 - 1) and p.sees(leaf2 + 1, leaf2)   # the prefix and its own leaf
    assert not p.sees(leaf2, n0)                               # not the sibling leaf
    trunk = n0 + 9
    assert p.sees(trunk + 3, trunk) and not p.sees(trunk, leaf2) and not p.sees(trunk, n0)  # trunk: not the leaves
    assert not p.sees(0, 1)                                    # causal


def test_rows_that_are_no_layout_stay_causal():
    leaves = [1, 102, 7, 8, 103, 2, 102, 9, 103]
    bad_copy = [1, 102, 7, 7, 103, 2, 102, 9, 103]
    for row in ([40, 41, 42, 5, 104],                                     # no outline (a sequential trace)
                PROMPT + [100, 1, 2, 101, *leaves, 5, 104],               # no trunk
                PROMPT + [100, 1, 2, 101, *leaves, *bad_copy, 5, 104],    # a trunk that is not the leaves
                PROMPT + [100, 1, 2, 101, 1, 102, 7, 8],                  # a branch without its end
                PROMPT + [100, 101, 5]):                                  # no label
        assert plan(row, T) is None
