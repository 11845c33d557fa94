"""The cluster allocation plot (``placement cluster simulate ... --plot``): its legend overlapped its
title (both in the figure's top right corner) when the title was long (a Synergy bound's) or the job
names were. The legend's and the title's boxes on the rendered figure must be apart, and the legend
must stay inside the figure, clear of the panels."""

from __future__ import annotations

import pytest

from placement.cluster.policies import Capacity
from placement.cluster.simulate import SimJob, plot_allocations, simulate
from tests.test_cluster_policies import linear

pytest.importorskip("matplotlib")

NAMES = ["resnet50-training-imagenet", "bert-large-finetune-squad", "gpt2-medium-pretrain", "vit-base-cifar",
         "t5-small", "llama-7b-lora", "deepspeech2", "yolov5-coco"]
# as long as a Synergy bound's title: "fifo+opt (a bound, not a schedule): devices used ... max rho 1.6)"
TITLE = ("fifo+opt (a bound, not a schedule): devices used per job over time (avg JCT 3.748e+04 ms, max "
         "rho 1.6)")


def _drawn(monkeypatch, tmp_path, names, **kwargs):
    """The figure plot_allocations saves (kept as it is saved, its layout done) and its renderer."""
    from matplotlib.figure import Figure

    saved = []
    real = Figure.savefig

    def savefig(self, *args, **kw):
        saved.append(self)
        return real(self, *args, **kw)

    monkeypatch.setattr(Figure, "savefig", savefig)
    jobs = [SimJob(n, linear(2), 100.0 + 10 * i, 2.0 * i) for i, n in enumerate(names)]
    result = simulate(jobs, Capacity(("acc", "cpu"), (4, 0), (False, True)), "even")
    path = tmp_path / "alloc.png"
    plot_allocations(result, str(path), **kwargs)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (fig,) = saved
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # the layout as saved
    return fig, canvas.get_renderer()


@pytest.mark.parametrize("names, title", [(NAMES, TITLE), (NAMES, None), (["a", "b"], TITLE),
                                          ([f"job-{i}-" + "x" * 2 * i for i in range(20)], TITLE)])
def test_the_legend_is_clear_of_the_title_and_the_panels(names, title, monkeypatch, tmp_path):
    fig, renderer = _drawn(monkeypatch, tmp_path, names, title=title)
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    heading = fig._suptitle.get_window_extent(renderer)
    assert not box.overlaps(heading), (box, heading)
    assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1), (box, fig.bbox)
    for ax in fig.axes:  # the panels with their tick labels and axis labels
        assert not box.overlaps(ax.get_tightbbox(renderer)), (box, ax)
    assert [t.get_text() for t in legend.get_texts()] == names


def test_more_than_twenty_jobs_have_no_legend(monkeypatch, tmp_path):
    fig, _ = _drawn(monkeypatch, tmp_path, [f"j{i}" for i in range(21)])
    assert not fig.legends
