"""Imported by the suite's fork server: compiles (or loads from numba's cache) the solvers' kernels once,
so that every run forked from it times its solve, not the loading of compiled code."""

from __future__ import annotations


def _warm() -> None:
    try:
        from graphs.model import Cluster, DeviceKind, Node, OpGraph
        from solvers.registry import bench_solvers, get_solver
    except ImportError:  # pragma: no cover
        return
    g = OpGraph.from_nodes([Node(f"n{i}", {"acc": 1.0, "cpu": 3.0}, memory=1.0, comm=0.5) for i in range(4)],
                           [("n0", "n1"), ("n1", "n2"), ("n1", "n3")])
    cl = Cluster((DeviceKind("acc", 2, 10.0), DeviceKind("cpu", 1, None, False)))
    for name in bench_solvers("tiny"):  # the solvers that run on a 4-node graph in milliseconds
        try:
            get_solver(name)(g, cl)
        except Exception:  # a solver missing or failing here fails again, visibly, in its runs
            continue


_warm()
