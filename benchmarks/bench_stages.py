"""The exact replicated DP (``dp``'s stage form) against Piper's reference table and scalability grid
(``shared/workloads/piper/FORMAT.md``): our time per sample and wall time next to Piper's C++ (results
in benchmarks/README_stages.md).

    python -m benchmarks.bench_stages [--grid] [--table] [--gnmt] [--max-k 2048] [--time-limit S]

BERT is grown to 64 and 96 layers by duplicating a middle ``ParallelTransformerLayer`` node with its
edges and variants, re-pointing the neighbours' sync costs to the copy (:func:`grow_bert`).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time

GiB = 2 ** 30
_ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "workloads")
PIPER_DIR = os.path.join(os.environ.get("PLACEMENT_WORKLOADS", _ROOT), "piper")

# file, k, memory, N, bandwidth (None: the file's), Piper's tps (None: infeasible), Piper's seconds
TABLE = [
    ("bert32a100", None, None, None, None, 0.09772736112, 0.03),
    ("gnmt", None, None, None, None, 53.4911057249, 221.6),
    ("resnet", None, None, None, None, 46.2381019168, 2.2),
    ("bert32a100", 8, 8 * GiB, 1920, 25 * GiB, 0.16585575, 0.03),
    ("bert32a100", 8, 2 * GiB, 1920, 25 * GiB, None, 0.02),
    ("bert32a100", 64, 8 * GiB, 1920, 25 * GiB, 0.0202005502945, 0.13),
    ("bert32a100", 64, 2 * GiB, 1920, 25 * GiB, 0.0320300812349, 0.10),
    ("bert32a100", 512, 8 * GiB, 1920, 25 * GiB, 0.00256112784601, 2.2),
    ("bert32a100", 512, 2 * GiB, 1920, 25 * GiB, 0.00366752625994, 2.0),
]
# layers -> {k: Piper's seconds} (8 GiB, N = 1920, 25 GiB/s)
GRID = {32: {64: 0.13, 512: 2.1, 2048: 38.5}, 64: {64: 0.59, 512: 4.9, 2048: 107.4},
        96: {64: 1.57, 512: 9.3, 2048: 229.5}}


def grow_bert(data: dict, layers: int) -> dict:
    """A copy of Piper's BERT JSON with ``layers`` transformer layers: copies of a middle layer X are
    inserted right after it (X -> copy -> X's old successor), each with X's variants, the shared input's
    edge and X's edge costs; sync costs that named the neighbour now name the copy."""
    d = copy.deepcopy(data)
    nodes = {n["id"]: n for n in d["nodes"]}
    chain = [n["id"] for n in d["nodes"] if n["name"] == "ParallelTransformerLayer"]
    if len(chain) > layers:
        raise ValueError(f"the file already has {len(chain)} layers")
    x = chain[len(chain) // 2]
    next_id = max(nodes) + 1
    for _ in range(layers - len(chain)):
        outs = [e for e in d["edges"]
                if e["sourceId"] == x and nodes[e["destId"]]["name"] == "ParallelTransformerLayer"]
        if len(outs) != 1:
            raise ValueError(f"layer {x} has {len(outs)} successor layers")
        s_edge = outs[0]
        s = s_edge["destId"]
        y = next_id
        next_id += 1
        ins = [e for e in d["edges"] if e["destId"] == x]
        prev = [e for e in ins if nodes[e["sourceId"]]["name"] in ("ParallelTransformerLayer", "Embedding")]
        new = copy.deepcopy(nodes[x])
        new["id"] = y
        for lst in new["TMPCs"].values():
            for v in lst:
                fw = v.get("syncTimeFw", {})
                for e in prev:  # the copy's layer input comes from x
                    if str(e["sourceId"]) in fw:
                        fw[str(x)] = fw.pop(str(e["sourceId"]))
        for lst in nodes[x]["TMPCs"].values():  # x's output now goes to the copy
            for v in lst:
                bw = v.get("syncTimeBw", {})
                if str(s) in bw:
                    bw[str(y)] = bw.pop(str(s))
        for lst in nodes[s]["TMPCs"].values():  # s's layer input now comes from the copy
            for v in lst:
                fw = v.get("syncTimeFw", {})
                if str(x) in fw:
                    fw[str(y)] = fw.pop(str(x))
        d["nodes"].append(new)
        nodes[y] = new
        for e in ins:
            src = x if e in prev else e["sourceId"]
            d["edges"].append({"sourceId": src, "destId": y, "communicationCost": e["communicationCost"]})
        s_edge["sourceId"] = y
    return d


def run_one(data: dict, *, label: str, k=None, mem=None, N=None, bw=None, time_limit=None) -> dict:
    from graphs.parallel import evaluate_plan
    from graphs.piper import parse_piper
    from solvers.dp_stages import solve_problem

    p = parse_piper(data, source=label, devices=k, memory=mem, microbatches=N, bandwidth=bw)
    t0, c0 = time.perf_counter(), time.process_time()
    r = solve_problem(p, time_limit=time_limit)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = {"label": label, "k": p.kinds[0].count, "status": str(r.status), "tps": r.objective, "time": wall,
           "cpu": cpu, "stages": len(r.plan or []), "stats": {k: v for k, v in (r.stats or {}).items()}}
    if r.plan is not None:
        ev = evaluate_plan(p, r.plan)
        assert ev.valid, ev.problems
        out["d_max"] = max(s.d for s in r.plan)
        out["t_max"] = max(s.t for s in r.plan)
    return out


def _warm() -> None:
    from graphs.piper import parse_piper
    from solvers.dp_stages import solve_problem

    v = {"id": "vanilla", "timePerSample": 1.0, "parameterSize": 4.0, "memoryUsageA": 2.0,
         "memoryUsageB": 8.0}
    d = {"maxDevices": 4, "maxMemoryPerDevice": 100.0, "bandwidth": 10.0, "mbsInBatch": 4,
         "nodes": [{"id": 0, "TMPCs": {"1": [v, dict(v, id="r", memoryUsageA=1.0)]}},
                   {"id": 1, "TMPCs": {"1": [v]}}],
         "edges": [{"sourceId": 0, "destId": 1, "communicationCost": 10.0}]}
    solve_problem(parse_piper(d))
    solve_problem(parse_piper(d, memory=13.0, schedule="gpipe"))


def _fmt(x, digits=12) -> str:
    if x is None:
        return "infeasible"
    return "inf" if math.isinf(x) else f"{x:.{digits}g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", action="store_true", help="Piper's reference table")
    ap.add_argument("--grid", action="store_true", help="the scalability grid")
    ap.add_argument("--gnmt", action="store_true", help="include gnmt (Piper: 222 s) in the table")
    ap.add_argument("--max-k", type=int, default=2048)
    ap.add_argument("--time-limit", type=float, default=None)
    ap.add_argument("--json", default=None, metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    if not (args.table or args.grid):
        args.table = args.grid = True
    if not os.path.isdir(PIPER_DIR):
        print(f"Piper workloads not found at {PIPER_DIR}", file=sys.stderr)
        return 2
    _warm()
    rows = []
    files = {}

    def load(name):
        if name not in files:
            files[name] = json.load(open(os.path.join(PIPER_DIR, name + ".json")))
        return files[name]

    if args.table:
        print("| file | k | memory | N | our tps | Piper tps | our stages | d max | t max | our wall (cpu) "
              "| Piper time | ratio |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name, k, mem, N, bw, tps, secs in TABLE:
            if name == "gnmt" and not args.gnmt:
                continue
            r = run_one(load(name), label=name, k=k, mem=mem, N=N, bw=bw, time_limit=args.time_limit)
            ours = None if r["status"] == "infeasible" else r["tps"]
            memtxt = "file" if mem is None else f"{mem // GiB} GiB"
            print(f"| {name} | {r['k']} | {memtxt} | {N or 'file'} | {_fmt(ours)} ({r['status']}) | "
                  f"{_fmt(tps)} | {r['stages']} | {r.get('d_max', '—')} | {r.get('t_max', '—')} | "
                  f"{r['time']:.3g} s ({r['cpu']:.3g} s) | {secs} s | {r['time'] / secs:.2f} |", flush=True)
            rows.append(dict(r, piper_tps=tps, piper_time=secs))
    if args.grid:
        print("\n| layers | k | our tps | status | our wall (cpu) | Piper time | ratio |")
        print("|---|---|---|---|---|---|---|")
        for layers, per_k in GRID.items():
            data = load("bert32a100") if layers == 32 else grow_bert(load("bert32a100"), layers)
            for k, secs in per_k.items():
                if k > args.max_k:
                    continue
                r = run_one(data, label=f"bert{layers}", k=k, mem=8 * GiB, N=1920, bw=25 * GiB,
                            time_limit=args.time_limit)
                print(f"| {layers} | {k} | {_fmt(r['tps'])} | {r['status']} | {r['time']:.3g} s "
                      f"({r['cpu']:.3g} s) | {secs} s | {r['time'] / secs:.2f} |", flush=True)
                rows.append(dict(r, layers=layers, piper_time=secs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
