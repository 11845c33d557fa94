"""The Gantt charts' cost in the number of tasks (placement/draw.py). ``placement show`` drew one
matplotlib artist per task, and matplotlib rescales the axes over every artist at each one added: a
PipeDream plan of Piper's bert32a100 (10 stages, 1920 micro-batches, 192,000 tasks) drew for more than
15 minutes where ``--no-draw`` took 8 s. The charts now draw one collection per row and style, and past
``MAX_TASKS_PER_ROW`` bars on a row only the run's beginning, saying so in the title.

The default tests count artists (not time): the collections stay as many as the rows and styles while
the micro-batches grow, and every bar is drawn up to the limit. The drawing of the 1920-micro-batch
plan itself is ``slow``."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from graphs.errors import InputError
from graphs.model import Cluster, DeviceKind, Node, OpGraph
from graphs.parallel import Stage
from graphs.piper import parse_piper
from placement import draw
from placement.simulate import simulate, simulate_plan
from tests.instances import WORKLOADS
from tests.test_piper import _tiny

pytest.importorskip("matplotlib")


@pytest.fixture
def figures(monkeypatch):
    """The figures the charts save (not written: only their artists are looked at)."""
    from matplotlib.figure import Figure

    saved = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: saved.append(self))
    return saved


def _bars(fig):
    """(collections, rectangles, texts, title) of a chart's axes."""
    ax = fig.axes[0]
    return len(ax.collections), sum(len(c.get_paths()) for c in ax.collections), len(ax.texts), ax.get_title()


def _two_stage_stream(microbatches: int, overlap: bool = False):
    """Two devices, one node each of time 1 and no communication, streamed: stage 0 runs micro-batch m
    over [m, m + 1], stage 1 over [m + 1, m + 2]; one compute bar per stage and micro-batch (with
    overlap, on each stage's compute engine; its receive and send engines have nothing to do)."""
    g = OpGraph.from_nodes([Node("a", {"gpu": 1.0}, comm=0.0), Node("b", {"gpu": 1.0}, comm=0.0)],
                           [("a", "b")])
    return simulate(g, Cluster((DeviceKind("gpu", 2),)), np.array([0, 1]), schedule="stream",
                    microbatches=microbatches, overlap=overlap)


def _tiny_plan(schedule: str, microbatches: int):
    """Piper's tiny file (tests/test_piper.py) as two stages, the second on two replicas (d = 2), three
    batches: per batch stage 0 runs N forwards and N backwards, each replica of stage 1 N/2 of each and
    the stage's all-reduce (its parameters synchronised: positive time); 3 (4N + 2) bars on three
    rows."""
    p = parse_piper(_tiny(), schedule=schedule, microbatches=microbatches)
    plan = [Stage((0,), 0, 1, 1, (0,)), Stage((1,), 0, 2, 1, (1,))]
    return simulate_plan(p, plan, batches=3)


@pytest.mark.parametrize("overlap", [False, True])
def test_one_device_per_stage_chart_draws_a_collection_per_row_and_style(figures, tmp_path, overlap):
    for m in (40, 160):  # at most 160 tasks a row: all drawn under the default limit
        draw.gantt_chart(_two_stage_stream(m, overlap), tmp_path / "g.png")
        collections, rects, _texts, title = _bars(figures[-1])
        assert rects == 2 * m  # every bar: one compute per stage and micro-batch (by hand, above)
        assert collections == 2  # one per row that holds work (forward compute only)
        assert "showing" not in title


def test_the_limit_counts_tasks_not_their_transfers(figures, tmp_path):
    """tests/test_draw.py's two-stage training placement (a chain of four, two nodes a device, every
    tensor 0.2): per micro-batch stage 0 computes its forward and sends, receives the gradient and
    computes its backward; stage 1 receives, computes, computes, sends: four bars of two tasks a stage.
    64 micro-batches under 1F1B are 256 bars but 128 tasks a row: drawn whole, as before the limit."""
    from tests.test_draw import small_training

    g, cl, a = small_training()
    draw.gantt_chart(simulate(g, cl, a, schedule="1f1b", microbatches=64), tmp_path / "g.png")
    collections, rects, _texts, title = _bars(figures[-1])
    assert rects == 2 * 4 * 64 and "showing" not in title
    assert collections == 2 * 4  # a row: forward compute, its send or receive, and the backward's
    draw.gantt_chart(simulate(g, cl, a, schedule="1f1b", microbatches=150), tmp_path / "g.png")
    assert "of the 150 micro-batches started): the whole run holds more than 200 tasks a row" \
        in _bars(figures[-1])[3]


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "pipedream", "2bw"])
def test_stage_chart_draws_a_collection_per_row_and_style(figures, tmp_path, schedule):
    devices = [["gpu:0"], ["gpu:1", "gpu:2"]]
    for n in (10, 30):  # at most 3 x 2 x 30 = 180 tasks a row: all drawn under the default limit
        draw.stage_gantt_chart(_tiny_plan(schedule, n), tmp_path / "g.png", devices=devices)
        collections, rects, _texts, title = _bars(figures[-1])
        assert rects == 3 * (4 * n + 2)
        # stage 0: forwards and backwards; each replica of stage 1: those and its all-reduces
        assert collections == 2 + 3 + 3
        assert "showing" not in title


def test_past_the_limit_the_chart_shows_the_beginning_and_says_so(figures, tmp_path):
    """500 micro-batches through two stages of time 1 (makespan 501): stage 0's 201st bar starts at
    200, stage 1's at 201, so the chart shows [0, 200]: 200 bars of stage 0 (micro-batches 0-199) and
    199 of stage 1 (0-198)."""
    sim = _two_stage_stream(500)
    draw.gantt_chart(sim, tmp_path / "g.png")
    assert draw.MAX_TASKS_PER_ROW == 200
    collections, rects, texts, title = _bars(figures[-1])
    assert (collections, rects) == (2, 399)
    assert "showing the first 200 of 501 (200 of the 500 micro-batches started)" in title
    assert "the figures above are the whole run's" in title
    assert figures[-1].axes[0].get_xlim() == (0.0, 200.0)
    assert texts == 0  # bars of width 1 in a window of 200: none wide enough for its number
    # a limit of its own, or none
    draw.gantt_chart(sim, tmp_path / "g.png", max_tasks_per_row=50)
    assert _bars(figures[-1])[1] == 50 + 49 and "showing the first 50 of 501" in _bars(figures[-1])[3]
    draw.gantt_chart(sim, tmp_path / "g.png", max_tasks_per_row=None)
    assert _bars(figures[-1])[1] == 1000 and "showing" not in _bars(figures[-1])[3]


def test_a_stage_plan_past_the_limit_shows_the_beginning_in_its_unit(figures, tmp_path):
    sim = _tiny_plan("pipedream", 100)  # stage 0: 600 bars
    draw.stage_gantt_chart(sim, tmp_path / "g.png", devices=[["gpu:0"], ["gpu:1", "gpu:2"]], scale=1e3,
                           unit="ms")
    _collections, rects, _texts, title = _bars(figures[-1])
    assert "showing the first " in title and f" ms of {sim.makespan * 1e3:.4g} ms (" in title
    assert f"of the {3 * 100} micro-batches started)" in title
    ax = figures[-1].axes[0]
    cut = ax.get_xlim()[1]
    for c in ax.collections:  # every bar drawn starts inside the window, at most 200 a row (a task a bar)
        xs = np.array([p.vertices[:, 0].min() for p in c.get_paths()])
        assert (xs < cut).all()
    assert rects <= 3 * 200
    # the cut: the earliest start of a replica's 201st task of positive time
    rows = {}
    for t in sim.tasks:
        if t.duration > 0:
            rows.setdefault((t.stage, t.replica), []).append(t.start * 1e3)
    assert len(rows[(0, 0)]) == 600 and len(rows[(1, 0)]) == 303
    assert cut == pytest.approx(min(sorted(xs)[200] for xs in rows.values()), rel=1e-12)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "100"])
def test_a_bad_limit_is_refused(tmp_path, bad):
    with pytest.raises(InputError, match="max_tasks_per_row must be a positive integer or None"):
        draw.gantt_chart(_two_stage_stream(4), tmp_path / "g.png", max_tasks_per_row=bad)
    with pytest.raises(InputError, match="max_tasks_per_row"):
        draw.stage_gantt_chart(_tiny_plan("1f1b", 4), tmp_path / "g.png", devices=[["a"], ["b", "c"]],
                               max_tasks_per_row=bad)


def test_the_simulation_reads_each_task_once_for_its_stage_reports(monkeypatch):
    """simulate_costs gathered each stage's tasks by a scan of all of them (stages x tasks reads: 64
    stages of 1000 micro-batches spent 5 of 23 s there); counted, not timed: a task's stage is read
    once per task to group them."""
    import placement.simulate as simulate_module
    from placement.simulate import StageCosts, simulate_costs

    reads = [0]

    class Counted(simulate_module.Task):
        def __getattribute__(self, name):
            if name == "stage":
                reads[0] += 1
            return super().__getattribute__(name)

    monkeypatch.setattr(simulate_module, "Task", Counted)
    S, M = 16, 10
    stages = [StageCosts(i, i, f"gpu:{i}", "gpu", 1.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                         deps=(("F", i - 1, "F"),) if i else ()) for i in range(S)]
    sim = simulate_costs(stages, schedule="stream", microbatches=M)
    tasks = S * M * 3  # receive, compute and send of every forward
    assert len(sim.tasks) == tasks
    assert reads[0] <= 2 * tasks  # the old scan: S x tasks = 7680


@pytest.mark.slow
def test_show_draws_a_1920_microbatch_pipedream_plan(tmp_path):
    """The reviewed case: Piper's bert32a100 placed one device per stage under PipeDream (10 stages,
    1920 micro-batches a batch, 5 batches simulated). It drew for more than 15 minutes; now about
    twice --no-draw. Its printed figures are --no-draw's."""
    workload = os.path.join(WORKLOADS, "piper", "bert32a100.json")
    if not os.path.exists(workload):
        pytest.skip(f"Piper workloads not found at {os.path.dirname(workload)} (set PLACEMENT_WORKLOADS)")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    res = str(tmp_path / "pd.json")

    def cli(*args, timeout):
        return subprocess.run([sys.executable, "-m", "placement", *args], capture_output=True, text=True,
                              env=env, timeout=timeout, cwd=tmp_path)

    placed = cli("place", workload, "--schedule", "pipedream", "--max-replicas", "1", "--out", res,
                 timeout=300)
    assert placed.returncode == 0, placed.stderr
    quiet = cli("show", res, "--no-draw", timeout=300)
    assert quiet.returncode == 0, quiet.stderr
    assert "1920 micro-batches per batch, 5 batches simulated" in quiet.stdout
    drawn = cli("show", res, "--out-dir", str(tmp_path / "pics"), timeout=300)
    assert drawn.returncode == 0, drawn.stderr
    assert drawn.stdout.startswith(quiet.stdout)
    assert drawn.stdout[len(quiet.stdout):].startswith("wrote ")
    assert (tmp_path / "pics" / "pd.gantt.png").read_bytes()[:4] == b"\x89PNG"
