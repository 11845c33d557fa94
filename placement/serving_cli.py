"""Serving on the command line: compute utilisation lines, batch-size sweeps and latency targets for
``place``, and the ``frontier`` and ``provision`` commands (:mod:`placement.serving` does the work)."""

from __future__ import annotations

import math

__all__ = ["format_mfu", "mfu_lines", "show_mfu_lines"]


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%" if x >= 0.001 else f"{100 * x:.3g}%"


def compute_utilisation(graph, cluster, assignment, period_ms=None):
    from graphs.mfu import compute_utilisation as cu  # numpy stays out of `placement --help`

    return cu(graph, cluster, assignment, period_ms=period_ms)


def format_mfu(mfu) -> str:
    """Compute utilisation (MFU) in a few lines: the plan's total and every device that runs something.
    Empty when the graph has no FLOP counts (reference JSON workloads)."""
    if mfu is None or not math.isfinite(mfu.period_ms):
        return ""
    used = [d for d in mfu.devices if d.flops > 0]
    parts = ", ".join(f"{d.name} {_pct(d.mfu)}" for d in used)
    return (f"compute utilisation (MFU: achieved / peak FLOP/s, not busy time): total {_pct(mfu.total)} "
            f"({mfu.achieved / 1e12:.4g} of {mfu.peak_flops / 1e12:.4g} TFLOP/s)"
            + (f"; {parts}" if parts else ""))


def mfu_lines(placement) -> str:
    """:func:`format_mfu` of a :class:`~placement.api.Placement` and a newline (empty without a
    placement or FLOP counts)."""
    if placement.assignment is None:
        return ""
    return show_mfu_lines(placement.graph, placement.cluster, placement.assignment, None)


def show_mfu_lines(graph, cluster, assignment, period_ms: float | None) -> str:
    """:func:`format_mfu` for an assignment, one sample every ``period_ms`` (default: its max-load),
    and a newline; empty without FLOP counts."""
    text = format_mfu(compute_utilisation(graph, cluster, assignment, period_ms=period_ms))
    return text + "\n" if text else ""


# ---------------------------------------------------------------- place --batch-size / --latency-slo
def batch_size_arg(text: str):
    """``--batch-size``: an int for one batch size; ``"auto"`` or a comma list (kept as text) for a
    sweep, which only ``place`` and ``frontier`` run."""
    t = text.strip().lower()
    if t.isdigit() and int(t) >= 1:
        return int(t)
    from .serving import parse_batch_sizes

    parse_batch_sizes(t)  # raises InputError on a malformed list
    return t


def single_batch(value):
    """The ``batch_size`` front-end option of commands that take one batch size."""
    if value is None or isinstance(value, int):
        return value
    from graphs.errors import InputError

    raise InputError(f"--batch-size {value}: a list or auto is for place and frontier; give one batch size")


def add_place_options(p) -> None:
    """``place`` options of this module."""
    p.add_argument("--latency-slo", type=float, default=None, metavar="MS",
                   help="maximise throughput with the latency of one batch at most MS (ms), across "
                        "placements and batch sizes (ONNX models)")


def wants_serving(args) -> bool:
    """Whether ``place`` should run a batch sweep or a latency target (this module) instead."""
    return isinstance(args.batch_size, str) or getattr(args, "latency_slo", None) is not None


def _options(args):
    from solvers.base import SolveOptions

    return SolveOptions(time_limit=args.time_limit, gap=args.gap, threads=args.threads,
                        seed=getattr(args, "seed", 0),
                        backend=getattr(args, "backend", "highs"))


def _need_onnx(path: str, what: str) -> None:
    from graphs.errors import InputError

    if not path.lower().endswith(".onnx"):
        raise InputError(f"{what} needs an ONNX model (.onnx): batch sizes and FLOPs come from its shapes",
                         source=path)
    import os

    if not os.path.isfile(path):  # before anything else is checked or computed
        raise InputError("no such file", source=path)


def _sizes(value):
    from .serving import parse_batch_sizes

    if value is None:
        return [1]
    return parse_batch_sizes(value)


def _sweep_rows(sw) -> str:
    rows = [["batch", "samples/s", "latency ms", "max-load ms", "status", "MFU", "note"]]
    for b, pt, why in sw.points:
        if pt is None:
            rows.append([str(b), "-", "-", "-", "-", "-", why])
            continue
        m = compute_utilisation(pt.placement.graph, pt.placement.cluster, pt.placement.assignment)
        best = " <- best" if sw.best is pt else ""
        rows.append([str(b), f"{pt.samples_per_s:.6g}", f"{pt.latency_ms:.6g}", f"{pt.max_load:.6g}",
                     pt.placement.status.value, _pct(m.total) if m else "-", best.strip()])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) if 0 < i < 6 else c.ljust(w) for i, (c, w) in
                               enumerate(zip(r, widths))).rstrip() for r in rows)


def _serving_section(sw) -> dict:
    def num(x):
        return x if x is not None and math.isfinite(x) else None

    return {
        "latency_slo_ms": sw.latency_slo, "stopped": sw.stopped, "lowest_latency_ms": num(sw.lowest_latency),
        "best_batch_size": sw.best.batch_size if sw.best else None,
        "batch_sizes": [{"batch_size": b, "samples_per_s": num(pt.samples_per_s) if pt else None,
                         "latency_ms": num(pt.latency_ms) if pt else None,
                         "max_load": num(pt.max_load) if pt else None,
                         "status": pt.placement.status.value if pt else None, "note": why}
                        for b, pt, why in sw.points],
    }


def run_place(args, frontend: dict) -> int:
    """``place`` with ``--batch-size auto|LIST`` and/or ``--latency-slo``: sweep, print, write."""
    import sys

    from .export import print_json, result_dict, write_json
    from .report import format_summary, format_table
    from .serving import sweep

    _need_onnx(args.workload, "--batch-size auto/LIST and --latency-slo")
    if args.objective != "max-load" or args.training:
        from graphs.errors import InputError

        raise InputError("--batch-size auto/LIST and --latency-slo maximise inference throughput: drop "
                         "--objective and --training (a latency target is --latency-slo MS)")
    if args.latency_slo is not None and not (args.latency_slo > 0 and math.isfinite(args.latency_slo)):
        from graphs.errors import InputError

        raise InputError(f"--latency-slo must be a positive number of milliseconds, got {args.latency_slo}")
    sizes = _sizes(args.batch_size)
    sw = sweep(args.workload, frontend.get("devices"), sizes, costs=frontend.get("costs") or "roofline",
               latency_slo=args.latency_slo, solver=args.solver if args.latency_slo is None else None,
               options=_options(args), dims=frontend.get("dims"),
               device_files=frontend.get("device_files") or ())
    data = result_dict(sw.best.placement) if sw.best else {"schema": "placement-result", "version": 1,
                                                           "status": "infeasible", "devices": []}
    data["serving"] = _serving_section(sw)
    if args.out:
        write_json(args.out, data)
    if args.json:
        print_json(data)
    else:
        slo = f", latency <= {args.latency_slo:g} ms" if args.latency_slo is not None else ""
        print(f"batch sizes{slo} (samples/s = batch / max-load; latency = one batch end to end)")
        print(_sweep_rows(sw))
        if sw.stopped:
            print(f"stopped: {sw.stopped}")
    if sw.best is None:
        if args.latency_slo is not None:
            low = ("; the lowest latency achievable is "
                   f"{sw.lowest_latency:.6g} ms (batch {sw.points[0][0]})" if sw.lowest_latency else "")
            print(f"error: infeasible: no plan meets the latency target of {args.latency_slo:g} ms at any "
                  f"batch size tried{low}", file=sys.stderr)
        else:
            print("error: no batch size has a placement", file=sys.stderr)
        return 1
    if not args.json:
        p = sw.best
        first = next((pt for b, pt, _ in sw.points if pt is not None), None)
        gain = (f" ({p.samples_per_s / first.samples_per_s:.3g}x batch {first.batch_size}'s "
                f"{first.samples_per_s:.6g})" if first is not None and first is not p else "")
        print(f"\nbest batch size {p.batch_size}: {p.samples_per_s:.6g} samples/s{gain}, latency "
              f"{p.latency_ms:.6g} ms")
        table = format_table(p.placement)
        if table:
            print(table + "\n")
        print(format_summary(p.placement))
        sys.stdout.write(mfu_lines(p.placement))
        if args.out:
            print(f"result written to {args.out}")
    return 0


# ---------------------------------------------------------------- frontier
def add_parser(sub) -> None:
    """Register ``frontier`` and ``provision``."""
    f = sub.add_parser("frontier", help="throughput-latency frontier of a model",
                       description="Every non-dominated (samples/s, latency) plan of an ONNX model over the "
                       "batch sizes: for each, the best throughput under a latency limit, tightened point "
                       "by point (epsilon-constraint on the serving integer program); proven points are "
                       "optimal for both measures. Each plan is a placement result (placement show reads "
                       "it).")
    f.add_argument("model", help="ONNX model (.onnx)")
    _common(f)
    f.add_argument("--max-points", type=int, default=50, metavar="K", help="points per batch size at most "
                   "(default 50)")
    f.add_argument("--out", "-o", default=None, metavar="F.json", help="write the frontier (and one result "
                   "file per plan, F.<k>.json)")
    f.add_argument("--plot", default=None, metavar="F.png", help="draw the frontier")
    f.add_argument("--json", action="store_true", help="print the frontier JSON")

    v = sub.add_parser("provision", help="cheapest devices for a throughput target",
                       description="The cheapest allocation of the available devices (prices per "
                       "device-hour from --prices or the device files) that serves the target samples/s, "
                       "optionally under a latency target, with its plan and the price-throughput curve of "
                       "efficient allocations. Exact from one DP run over every allocation without a "
                       "latency target; with one, allocations are tried cheapest first with the serving IP.")
    v.add_argument("model", nargs="?", help="ONNX model (.onnx)")
    v.add_argument("--target-throughput", type=float, default=None, metavar="X", help="samples per second")
    v.add_argument("--latency-slo", type=float, default=None, metavar="MS",
                   help="latency of one batch at most MS milliseconds")
    v.add_argument("--available", default=None, metavar="SPEC", help="devices to choose from, e.g. "
                   "a100:8,t4:16,cpu:64")
    v.add_argument("--prices", default=None, metavar="FILE", help="TOML/JSON prices per device-hour "
                   "([prices] a100 = 3.0)")
    v.add_argument("--example-prices", default=None, metavar="FILE",
                   help="write an example prices file (made-up figures) and exit")
    v.add_argument("--max-solves", type=int, default=200, metavar="K",
                   help="with --latency-slo: integer programs solved at most (default 200)")
    v.add_argument("--out", "-o", default=None, metavar="RESULT.json", help="write the chosen plan (a "
                   "placement result with a 'provision' section)")
    v.add_argument("--json", action="store_true", help="print the result JSON")
    _common(v)
    v.set_defaults(devices=None)


def _common(p) -> None:
    p.add_argument("--devices", default=None, metavar="SPEC", help="cluster, e.g. a100:2,t4:4,cpu:8")
    p.add_argument("--device-file", dest="device_files", action="append", default=None, metavar="FILE",
                   help="TOML/JSON file defining device kinds (repeatable)")
    p.add_argument("--costs", default="roofline", metavar="MODEL",
                   help="roofline (default), profile, or a JSON cost table")
    p.add_argument("--batch-size", default=None, metavar="auto|N|LIST",
                   help="batch sizes: one (default 1), a list 1,2,4, or auto (1, 2, 4, ... while the best "
                        "throughput improves by 1%%)")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="seconds per integer program (default none); points then may be unproven")
    p.add_argument("--gap", type=float, default=1e-4, help="relative MIP gap (default 1e-4)")
    p.add_argument("--threads", type=int, default=None, help="solver threads")


def _frontier_dict(fr, out: str | None) -> dict:
    import os

    from .export import result_dict

    points = []
    stem = os.path.splitext(out)[0] if out else None
    for k, p in enumerate(fr.points):
        plan = result_dict(p.placement)
        points.append({"batch_size": p.batch_size, "samples_per_s": p.samples_per_s,
                       "latency_ms": p.latency_ms, "max_load": p.max_load, "proven": p.proven,
                       "plan_file": f"{stem}.{k}.json" if stem else None, "plan": plan})
    return {"schema": "placement-frontier", "version": 1, "proven": fr.proven,
            "definition": "non-dominated (samples/s, one-batch latency) plans; samples/s = 1000 batch / "
                          "max-load (ms)",
            "batch_sizes": {str(b): len(v) for b, v in fr.per_batch.items()}, "points": points}


def plot_frontier(fr, path: str) -> str:
    """Draw the frontier: samples/s against latency, proven points filled, others hollow."""
    from .draw import _matplotlib_figure

    Figure = _matplotlib_figure()
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    xs = [p.latency_ms for p in fr.points]
    ys = [p.samples_per_s for p in fr.points]
    ax.step(xs, ys, where="post", color="0.6", linewidth=1)
    for proven, style in ((True, {"color": "C0", "label": "proven"}),
                          (False, {"facecolors": "none", "edgecolors": "C3", "label": "not proven"})):
        sel = [p for p in fr.points if p.proven == proven]
        if sel:
            ax.scatter([p.latency_ms for p in sel], [p.samples_per_s for p in sel], zorder=3, **style)
    for p in fr.points:
        ax.annotate(f"b{p.batch_size}", (p.latency_ms, p.samples_per_s), textcoords="offset points",
                    xytext=(4, 4), fontsize=7)
    ax.set_xlabel("latency of one batch (ms)")
    ax.set_ylabel("samples / s")
    ax.set_title("throughput-latency frontier")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def run(args) -> int:
    """Run ``frontier`` or ``provision``."""
    if getattr(args, "out", None):
        from .cli import _output_file

        _output_file(args.out, "--out")  # before any work: a folder created, or one error line
    if args.command == "provision":
        return _run_provision(args)
    return _run_frontier(args)


def _run_frontier(args) -> int:
    import sys

    from .export import print_json, write_json
    from .serving import frontier

    _need_onnx(args.model, "placement frontier")
    if args.max_points < 1:
        from graphs.errors import InputError

        raise InputError("--max-points must be at least 1")
    sizes = _sizes(args.batch_size)  # default: batch 1; auto: doubling while throughput improves
    fr = frontier(args.model, args.devices, sizes, costs=args.costs, options=_options(args),
                  device_files=args.device_files or (), max_points=args.max_points)
    data = _frontier_dict(fr, args.out)
    if args.out:
        for pt in data["points"]:
            write_json(pt["plan_file"], pt["plan"])
        write_json(args.out, data)
    if args.json:
        print_json(data)
    else:
        rows = [["#", "batch", "samples/s", "latency ms", "max-load ms", "MFU", "proven"]]
        for k, p in enumerate(fr.points):
            m = compute_utilisation(p.placement.graph, p.placement.cluster, p.placement.assignment)
            rows.append([str(k), str(p.batch_size), f"{p.samples_per_s:.6g}", f"{p.latency_ms:.6g}",
                         f"{p.max_load:.6g}", _pct(m.total) if m else "-", "yes" if p.proven else "no"])
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        print(f"frontier: {len(fr.points)} non-dominated plan(s) over batch sizes "
              f"{', '.join(str(b) for b in fr.per_batch)}; "
              + ("all proven" if fr.proven else "NOT all proven (a limit was hit)"))
        for r in rows:
            print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
        if args.out:
            first = data["points"][0]["plan_file"] if data["points"] else None
            print(f"frontier written to {args.out}" + (f"; one result file per plan ({first}, ...)"
                                                       if first else ""))
    if args.plot:
        try:
            plot_frontier(fr, args.plot)
            if not args.json:
                print(f"plot written to {args.plot}")
        except ImportError:
            print("note: drawing the frontier needs matplotlib, which is not installed (pip install "
                  "matplotlib); frontier not drawn", file=sys.stderr)
    return 0 if fr.points else 1


# ---------------------------------------------------------------- provision
def _run_provision(args) -> int:
    import sys

    from graphs.devices import parse_devices
    from graphs.errors import InputError

    from .export import print_json, result_dict, write_json
    from .provision import EXAMPLE_PRICES, kind_prices, provision, read_prices
    from .serving import batch_workload

    if args.example_prices:
        import os

        try:  # the output's folder is created as for every command's outputs; one error line if it cannot be
            os.makedirs(os.path.dirname(os.path.abspath(args.example_prices)), exist_ok=True)
            with open(args.example_prices, "w", encoding="utf-8") as f:
                f.write(EXAMPLE_PRICES)
        except OSError as e:
            raise InputError(f"--example-prices {args.example_prices}: cannot write there "
                             f"({e.strerror or e})") from None
        print(f"wrote {args.example_prices}: example prices per device-hour (made-up figures; set your own)")
        return 0
    if not args.model:
        raise InputError("placement provision: give the ONNX model (or --example-prices FILE)")
    _need_onnx(args.model, "placement provision")
    if args.target_throughput is None or not args.available:
        raise InputError("placement provision needs --target-throughput X (samples/s) and --available SPEC "
                         "(e.g. a100:8,t4:16,cpu:64)")
    if args.devices:
        raise InputError("placement provision takes --available (the devices to choose from), not --devices")
    if args.latency_slo is not None and not args.latency_slo > 0:
        raise InputError(f"--latency-slo must be a positive number of milliseconds, got {args.latency_slo}")
    ds = parse_devices(args.available, args.device_files or ())
    prices = kind_prices(ds.specs, read_prices(args.prices) if args.prices else None)
    from .serving import AUTO_MAX_BATCH

    sizes = _sizes(args.batch_size) if args.batch_size is not None else [1]
    auto = sizes is None  # doubling batch sizes while the cheapest price keeps falling
    if auto:
        sizes = [1 << k for k in range(int(math.log2(AUTO_MAX_BATCH)) + 1)]
    results = []
    for b in sizes:
        w = batch_workload(args.model, ds, b, costs=args.costs, device_files=args.device_files or ())
        results.append((b, w, provision(w.graph, w.cluster, prices, args.target_throughput,
                                        latency_slo=args.latency_slo, options=_options(args),
                                        max_solves=args.max_solves)))
        if auto and len(results) > 1:
            prev, cur = results[-2][2].best, results[-1][2].best
            if (prev is not None and (cur is None or cur.price >= prev.price - 1e-12)) or (
                    prev is None and cur is None and args.latency_slo is not None):
                break  # no cheaper at this batch size (or the latency target rules larger ones out)
    found = [r for r in results if r[2].best is not None]
    b, w, pv = min(found, key=lambda r: (r[2].best.price, -r[2].best.samples_per_s)) if found else results[0]
    names = pv.kinds

    def alloc(counts) -> str:
        return ",".join(f"{k}:{c}" for k, c in zip(names, counts) if c) or "(none)"

    section = {
        "target_samples_per_s": args.target_throughput, "latency_slo_ms": args.latency_slo,
        "available": str(ds), "prices_per_hour": dict(zip(names, prices.tolist())), "batch_size": b,
        "proven": pv.proven, "allocation": alloc(pv.best.counts) if pv.best else None,
        "price_per_hour": pv.best.price if pv.best else None,
        "efficient": [{"allocation": alloc(a.counts), "price_per_hour": a.price,
                       "samples_per_s": a.samples_per_s, "max_load": a.max_load} for a in pv.efficient],
        "per_batch_size": [{"batch_size": bb, "allocation": alloc(p.best.counts) if p.best else None,
                            "price_per_hour": p.best.price if p.best else None} for bb, _, p in results],
    }
    data = {"schema": "placement-result", "version": 1, "status": "infeasible", "devices": []}
    if pv.best is not None and pv.solution is not None and pv.solution.assignment is not None:
        from .api import Placement

        ev = evaluate_plan(w.graph, pv.cluster, pv.solution)
        placement = Placement(w.graph, pv.cluster, pv.solution, ev)
        data = result_dict(placement)
        data.setdefault("frontend", {})["devices"] = alloc(pv.best.counts)
    data["provision"] = section
    if args.out:
        write_json(args.out, data)
    if args.json:
        print_json(data)
    else:
        slo = f" with latency <= {args.latency_slo:g} ms" if args.latency_slo is not None else ""
        print(f"price-throughput curve of efficient allocations (batch {b}{slo}; "
              + ("every allocation, exact" if args.latency_slo is None else "allocations solved") + "):")
        rows = [["allocation", "$/hour", "samples/s", "$ per 1M samples"]]
        for a in pv.efficient:
            rows.append([alloc(a.counts), f"{a.price:.4g}", f"{a.samples_per_s:.6g}",
                         f"{a.price / (a.samples_per_s * 3600) * 1e6:.4g}"])
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for r in rows:
            print("  " + "  ".join(c.ljust(wd) if i == 0 else c.rjust(wd) for i, (c, wd) in
                                   enumerate(zip(r, widths))))
        if pv.best is not None:
            print(f"cheapest for {args.target_throughput:g} samples/s{slo}: {alloc(pv.best.counts)} at "
                  f"{pv.best.price:.4g} per hour, {pv.best.samples_per_s:.6g} samples/s (batch {b}); "
                  + ("proven cheapest" if pv.proven else "NOT proven cheapest (a limit was hit)"))
            sys.stdout.write(mfu_lines(placement))
            if args.out:
                print(f"plan written to {args.out}")
    if pv.best is None:
        top = max((r[2].max_reachable for r in results if r[2].max_reachable is not None),
                  key=lambda a: a.samples_per_s, default=None)
        most = (f"; the most any allocation serves{' under the latency target' if args.latency_slo else ''} "
                f"is {top.samples_per_s:.6g} samples/s ({alloc(top.counts)})" if top else "")
        print(f"error: infeasible: {args.target_throughput:g} samples/s is unreachable with {ds}{most}",
              file=sys.stderr)
        return 1
    return 0


def evaluate_plan(graph, cluster, solution):
    from graphs.evaluate import evaluate

    return evaluate(graph, cluster, solution.assignment)
