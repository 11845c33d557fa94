"""The one batch-size loop (:class:`placement.serving.BatchLadder`) of the sweep, the frontier and
provision: which sizes it tries, when it ends and why, and each size's share of the time. Expected
values are worked out by hand from the rules in its docstring."""

from __future__ import annotations

import pytest

from placement.clock import LEAST_SOLVE_S, Clock
from placement.serving import BatchLadder
from solvers.base import INTERRUPTED


def climb(ladder: BatchLadder, scores: dict) -> list[int]:
    """Try the ladder's sizes, reporting ``scores[b]`` (missing: no plan); the sizes tried."""
    for b in ladder:
        ladder.scored(scores.get(b))
    return ladder.tried


def test_auto_doubles_until_the_figure_stops_improving_by_more_than_one_percent():
    # 1 -> 2 -> 4 improve by more than 1%; 8 is only 0.5% above 4: it ends there, and 8 is still the best
    ladder = BatchLadder(None, max_batch=64)
    assert climb(ladder, {1: 100.0, 2: 180.0, 4: 300.0, 8: 301.5, 16: 900.0}) == [1, 2, 4, 8]
    assert ladder.best == 301.5 and ladder.best_size == 8
    assert ladder.stopped == "batch 8: no more than 1% better than batch 4" and ladder.halt == ""


def test_auto_ends_at_a_size_without_a_plan_and_a_list_goes_on():
    ladder = BatchLadder(None, max_batch=64)
    assert climb(ladder, {1: 10.0, 2: 30.0}) == [1, 2, 4]
    assert ladder.stopped == "batch 4: no plan" and ladder.best_size == 2
    listed = BatchLadder([1, 4, 2])  # a list: every size, in its order, however the figures go
    assert climb(listed, {4: 5.0, 2: 5.0}) == [1, 4, 2]
    assert listed.stopped == "" and listed.best_size == 4  # a tie goes to the size tried first


def test_auto_runs_to_the_largest_size():
    ladder = BatchLadder(None, max_batch=8)
    assert climb(ladder, {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0}) == [1, 2, 4, 8]
    assert ladder.stopped == "reached the largest batch tried (8)" and ladder.best_size == 8


def test_a_price_ladder_ends_at_the_first_size_no_cheaper():
    # provision: the figure is minus the price, improves=0: any saving goes on, an equal price ends it
    ladder = BatchLadder(None, max_batch=64, improves=0.0)
    assert climb(ladder, {1: -10.0, 2: -8.0, 4: -8.0, 8: -1.0}) == [1, 2, 4]
    assert ladder.best_size == 2 and ladder.stopped.startswith("batch 4:")


def test_none_ends_only_where_asked():
    # provision without a latency target: no plan at batch 1 (the target throughput out of reach) does not
    # end it, a larger batch may reach it
    ladder = BatchLadder(None, max_batch=8, improves=0.0)
    for b in ladder:
        ladder.scored(-3.0 if b == 4 else None, none_ends=ladder.best is not None)
    assert ladder.tried == [1, 2, 4, 8] and ladder.best_size == 4 and ladder.stopped == "batch 8: no plan"


def test_end_replaces_the_words_and_stops_after_the_size():
    ladder = BatchLadder([1, 2, 4])
    for b in ladder:
        if b == 2:
            ladder.end("enough")
    assert ladder.tried == [1, 2] and ladder.stopped == "enough" and ladder.halt == ""


def test_the_first_size_is_tried_past_the_deadline_and_no_other():
    cases = (([1, 2, 4], "batch sizes 2, 4"), ([1, 8], "batch size 8"), (None, "batch 2 and above"))
    for sizes, rest in cases:
        ladder = BatchLadder(sizes, clock=Clock(0.0))
        assert climb(ladder, {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0}) == [1]
        assert ladder.halt == "time limit reached"
        assert ladder.stopped == f"time limit reached: {rest} not tried"


def test_a_ctrl_c_ends_it_before_and_after_a_size():
    hit = []
    ladder = BatchLadder([1, 2, 4], clock=Clock(None, stop=lambda: bool(hit)))
    for b in ladder:
        hit.append(b)  # the Ctrl-C comes during batch 1's search
    assert ladder.tried == [1] and ladder.halt == INTERRUPTED
    assert ladder.stopped == f"{INTERRUPTED}: batch sizes 2, 4 not tried"
    before = BatchLadder(None, clock=Clock(None, stop=lambda: True))
    assert climb(before, {}) == [] and before.stopped == f"{INTERRUPTED}: batch 1 and above not tried"
    # a search's own words (a Ctrl-C it took) come first, and win over the ladder's rules
    took = BatchLadder(None, halted=lambda: "stopped by the search" if took.tried else "")
    assert climb(took, {1: 1.0}) == [1]
    assert took.stopped == "stopped by the search: batch 2 and above not tried"


def test_a_limit_is_checked_before_each_size_but_the_first_and_never_after_one():
    # the goodput search's time limit: it lets no further size start, but a size tried is not cut short
    seen = []

    def limit():
        seen.append(ladder.tried[-1])
        return "time limit reached" if 2 in ladder.tried else ""

    ladder = BatchLadder([1, 2, 4], limit=limit)
    assert climb(ladder, {1: 1.0, 2: 2.0, 4: 4.0}) == [1, 2]
    assert seen == [1, 2]  # before batch 2 (after 1 was tried) and before batch 4: not before batch 1
    assert ladder.halt == "time limit reached"
    assert ladder.stopped == "time limit reached: batch size 4 not tried"
    # past the limit from the start: the first size is still tried; after the last, nothing is said
    last = BatchLadder([8, 16], limit=lambda: "time limit reached" if 16 in last.tried else "")
    assert climb(last, {8: 1.0, 16: 2.0}) == [8, 16] and last.stopped == "" and last.halt == ""
    auto = BatchLadder(None, max_batch=64, limit=lambda: "time limit reached")
    assert climb(auto, {1: 1.0, 2: 2.0}) == [1]
    assert auto.stopped == "time limit reached: batch 2 and above not tried"


def test_an_auto_ladder_without_the_flat_and_none_stops_runs_to_its_end_or_is_ended():
    # improves=None and none_ends=False (the goodput search): no plan at 1 and 16, the same figure at 2
    # and 4, less at 8: every size up to 32 is tried; the best is 2's (a tie goes to the smaller)
    ladder = BatchLadder(None, max_batch=32, improves=None)
    figures = {2: 5.0, 4: 5.0, 8: 3.0, 32: 4.0}
    for b in ladder:
        ladder.scored(figures.get(b), none_ends=False)
    assert ladder.tried == [1, 2, 4, 8, 16, 32] and ladder.best == 5.0 and ladder.best_size == 2
    assert ladder.stopped == "reached the largest batch tried (32)" and ladder.halt == ""
    # a memory stop: end after batch 8's no plan, nothing larger can fit
    ended = BatchLadder(None, max_batch=32, improves=None)
    for b in ended:
        ended.scored(None, none_ends=False)
        if b == 8:
            ended.end("batch 8: nor does any larger batch fit")
    assert ended.tried == [1, 2, 4, 8] and ended.best_size is None
    assert ended.stopped == "batch 8: nor does any larger batch fit" and ended.halt == ""


def test_multiple_of_keeps_the_auto_sizes_it_divides():
    # 8 micro-batches: of 1, 2, 4, ..., 64 only 8, 16, 32, 64 split into 8 equal parts; 3 splits none
    assert BatchLadder(None, max_batch=64, multiple_of=8).sizes == [8, 16, 32, 64]
    assert BatchLadder(None, max_batch=64, multiple_of=3).sizes == []
    assert BatchLadder([4, 12], multiple_of=8).sizes == [4, 12]  # a list is the caller's: kept as given
    ladder = BatchLadder(None, max_batch=64, multiple_of=8, limit=lambda: "time limit reached")
    assert climb(ladder, {8: 1.0}) == [8]
    assert ladder.stopped == "time limit reached: batch 16 and above not tried"


def test_each_size_gets_its_share_of_the_time_left():
    shares = []
    listed = BatchLadder([1, 2, 4, 8], clock=Clock(8.0))
    for _ in listed:
        shares.append(listed.share())
        break
    # a list of four: a quarter of the 8 s left (less what the clock has run since)
    assert shares[0] == pytest.approx(2.0, abs=0.05)
    auto = BatchLadder(None, clock=Clock(8.0))
    for _ in auto:
        shares.append(auto.share())
        break
    assert shares[1] == pytest.approx(4.0, abs=0.05)  # auto: half, the sizes after it open-ended
    late = BatchLadder([1, 2], clock=Clock(0.0))
    assert [late.share() for _ in late] == [LEAST_SOLVE_S]  # nothing left: the least a solve gets
    assert [BatchLadder([1]).share() for _ in range(1)] == [None]  # no clock: no limit


def test_the_frontier_names_the_sizes_it_left_untried_after_a_size_cut_short(monkeypatch):
    """A frontier whose batch 1 search the time limit cut short said only "batch 1: time limit reached":
    nothing said that batch sizes 2, 4 and 8 were never tried. Both are said now (stand-ins for the
    model and the search: batch 1's search runs past the deadline)."""
    import time

    from placement import serving

    calls = []

    def search(w, options, max_points, clock, on_point, found):
        calls.append(w)
        time.sleep(0.3)  # past the whole search's deadline
        return False, "time limit reached", ""

    monkeypatch.setattr(serving, "batch_workload", lambda path, devices, b, **kw: b)
    monkeypatch.setattr(serving, "_batch_frontier", search)
    fr = serving.FrontierSearch("m.onnx", "a100:1", [1, 2, 4, 8], deadline=time.perf_counter() + 0.2).run()
    assert calls == [1] and not fr.proven
    assert fr.stopped == "batch 1: time limit reached; time limit reached: batch sizes 2, 4, 8 not tried"
