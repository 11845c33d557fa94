"""PipeDream's linearisation (graphs.linearise), the one function both forms of ``pipedream`` use."""

import numpy as np

from graphs.linearise import idle_sources, linearise


def _groups(group, order):
    return [np.flatnonzero(group == c).tolist() for c in order.tolist()]


def test_a_diamond_merges_its_tails_and_a_chain_stays():
    group, order = linearise(5, [0, 0, 1, 2, 3], [1, 2, 3, 3, 4])
    assert _groups(group, order) == [[0, 1, 2], [3], [4]]
    group, order = linearise(4, [0, 1, 2], [1, 2, 3])
    assert _groups(group, order) == [[0], [1], [2], [3]]


def test_unseen_nodes_take_no_part_in_the_merge_but_order_the_walk():
    # 0 feeds every node: with its out-edges, 0, 1 and 2 are tails of one component
    src, dst = [0, 0, 0, 1, 2], [1, 2, 3, 2, 3]
    assert _groups(*linearise(4, src, dst)) == [[0, 1, 2], [3]]
    unseen = idle_sources(4, dst, [True, False, False, False])
    assert unseen.tolist() == [True, False, False, False]
    assert _groups(*linearise(4, src, dst, unseen=unseen)) == [[0], [1], [2], [3]]


def test_idle_sources_are_sources_only():
    # node 1 is idle but has a predecessor: not an input
    assert idle_sources(3, [1, 2], [True, True, False]).tolist() == [True, False, False]


def test_a_cycle_between_groups_is_merged():
    # 0 and 2 are tails of the cycle 0-3-2-4; 1 (unseen) lies between them: 0 -> 1 -> 2
    src, dst = [0, 2, 0, 2, 0, 1], [3, 3, 4, 4, 1, 2]
    unseen = np.array([False, True, False, False, False])
    assert _groups(*linearise(5, src, dst, unseen=unseen)) == [[0, 1, 2], [3], [4]]


def test_ties_follow_the_rank_and_direction():
    # 0 readies 1, 2 and 3 together; each is its own group (3 tails, 3 components)
    src, dst = [0, 0, 0], [1, 2, 3]
    assert linearise(4, src, dst)[1].tolist() == [0, 1, 2, 3]
    assert linearise(4, src, dst, highest_first=True)[1].tolist() == [0, 3, 2, 1]
    rank = [0, 5, 9, 7]
    assert linearise(4, src, dst, rank=rank)[1].tolist() == [0, 1, 3, 2]
    assert linearise(4, src, dst, rank=rank, highest_first=True)[1].tolist() == [0, 2, 3, 1]


def test_regroup_keeps_its_numbering_and_edges():
    seen = []

    def regroup(label):
        seen.append(label.tolist())
        # everything but node 3 in group 1, node 3 in group 0; the walk follows 1 -> 0 only
        return np.array([1, 1, 1, 0]), np.array([1]), np.array([0])

    group, order = linearise(4, [0, 0, 1, 2], [1, 2, 3, 3], regroup=regroup)
    assert seen == [[0, 0, 0, 3]]  # the diamond's tails as their smallest node
    assert group.tolist() == [1, 1, 1, 0] and order.tolist() == [1, 0]
