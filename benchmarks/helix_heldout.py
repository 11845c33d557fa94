"""Held-out Helix clusters: clusters unlike the two shipped ones, built in memory from them.

Issue 25 asks for a layout with a proven bound at most 10% above its value in 60 s on clusters of the
same format that we have not seen. This module derives such clusters from ``single24.json`` and
``3cluster24.json`` (read from ``shared/workloads/helix``; nothing derived is ever written to disk),
deterministic by seed, as decoded JSON in the files' own format, so that :func:`graphs.helix.parse_helix`
reads them exactly as ``placement place`` reads a file:

* ``perturb``: every node's capacity for every model and layer count multiplied by its own random factor
  in ``[0.97, 1.03]`` (no two nodes share a profile).
* ``sub``: a random subset of 16-20 of the 24 nodes (links between kept nodes kept), resampled until
  both models are placeable (the kept nodes' ``max_num_layers`` add up to the model's layers, and on
  the three-region file every region keeps a node).
* ``regions`` (the three-region file): nodes moved between regions, keeping the file's link rules: a
  link inside a region is fast (its bandwidth drawn from the file's intra-region links), between two
  regions slow (drawn from the file's inter-region links); a pair that keeps its relation keeps its
  link; source and sink links stay with their node. Region sizes are drawn at random (at least 3 nodes
  each).
* ``mix``: another GPU mix, e.g. 2 A100 / 10 L4 / 12 T4: nodes of a type dropped or cloned (a clone
  copies a node of its type, its profile and its links, in its region; its link to the original is an
  intra-region one). The profiles are the shipped ones: Helix computes ``typical_tokens_per_s`` with
  the cluster's ``machine_num_dict`` (FORMAT.md, "Caveat"), which we cannot recompute without Helix,
  so these clusters are in the format but not exactly what Helix would export for that mix.

Derived clusters carry no ``reference_layouts`` (the published layouts belong to the shipped files).
Link and node capacities follow the format's rules: node-node ``token_capacity_per_s`` is the bandwidth
over the model's ``activation_bytes_per_token``.

    python -m benchmarks.bench_helix --heldout [--kinds perturb,sub,regions,mix] [--seeds 0,1]
"""

from __future__ import annotations

import copy
import json
import os
import random

__all__ = ["load_raw", "perturbed", "subcluster", "resplit", "gpu_mix", "tiny", "heldout_cases", "placeable"]

SOURCE, SINK = "source", "sink"


def load_raw(folder: str, name: str) -> dict:
    """The decoded JSON of a shipped cluster file (read only)."""
    with open(os.path.join(folder, f"{name}.json"), encoding="utf-8") as f:
        return json.load(f)


def _derived(data: dict, name: str, how: str) -> dict:
    out = copy.deepcopy(data)
    out["name"] = name
    out["description"] = f"held-out cluster derived in memory from {data.get('name', '?')}: {how}"
    out["reference_layouts"] = {}
    return out


def _recount(data: dict) -> None:
    counts: dict[str, int] = {}
    for n in data["nodes"]:
        counts[n["gpu_type"]] = counts.get(n["gpu_type"], 0) + 1
    data["machine_num_dict"] = counts


def placeable(data: dict) -> bool:
    """Whether every model fits: the nodes' ``max_num_layers`` add up to its layers."""
    for key, m in data["models"].items():
        if sum(n["throughput"][key]["max_num_layers"] for n in data["nodes"]) < m["num_layers"]:
            return False
    return True


def perturbed(data: dict, seed: int, spread: float = 0.03) -> dict:
    """Every node's ``capacity_tokens_per_s[k]`` (each model, each ``k``) times its own factor drawn
    uniformly from ``[1 - spread, 1 + spread]``."""
    rng = random.Random(f"perturb-{data.get('name')}-{seed}")
    out = _derived(data, f"{data.get('name')}-perturb{seed}",
                   f"capacities times per-node factors in [{1 - spread}, {1 + spread}], seed {seed}")
    for n in out["nodes"]:
        for t in n["throughput"].values():
            caps = t["capacity_tokens_per_s"]
            for k in sorted(caps, key=int):
                caps[k] = caps[k] * rng.uniform(1 - spread, 1 + spread)
    return out


def _keep_nodes(data: dict, keep: set[int]) -> None:
    data["nodes"] = [n for n in data["nodes"] if n["index"] in keep]
    ends = keep | {SOURCE, SINK}
    data["links"] = [e for e in data["links"] if e["a"] in ends and e["b"] in ends]
    _recount(data)


def subcluster(data: dict, seed: int, sizes: tuple[int, int] = (16, 20)) -> dict:
    """A random subset of ``sizes[0] .. sizes[1]`` nodes (and their links), resampled until placeable
    (and, with regions, every region keeps a node)."""
    rng = random.Random(f"sub-{data.get('name')}-{seed}")
    ix = [n["index"] for n in data["nodes"]]
    regions = {n.get("partition") for n in data["nodes"]}
    for _ in range(1000):
        m = rng.randint(*sizes)
        keep = set(rng.sample(ix, m))
        out = _derived(data, f"{data.get('name')}-sub{seed}", f"{m} of {len(ix)} nodes, seed {seed}")
        _keep_nodes(out, keep)
        if placeable(out) and {n.get("partition") for n in out["nodes"]} == regions:
            return out
    raise ValueError("no placeable subcluster found")


def _node_links(data: dict) -> tuple[dict, list[dict], list[dict]]:
    """``(pair -> link, intra-region links, inter-region links)`` of the node-node links."""
    region = {n["index"]: n.get("partition") for n in data["nodes"]}
    pairs, intra, inter = {}, [], []
    for e in data["links"]:
        if e["a"] in (SOURCE, SINK) or e["b"] in (SOURCE, SINK):
            continue
        pairs[frozenset((e["a"], e["b"]))] = e
        (intra if region[e["a"]] == region[e["b"]] else inter).append(e)
    return pairs, intra, inter


def _link(data: dict, a: int, b: int, like: dict) -> dict:
    """A node-node link ``a``-``b`` with the bandwidth and latency of ``like``, capacities by the
    format's rule (bandwidth / activation bytes)."""
    e = copy.deepcopy(like)
    e["a"], e["b"] = a, b
    e["token_capacity_per_s"] = {key: e["bandwidth"] / m["activation_bytes_per_token"]
                                 for key, m in data["models"].items()}
    return e


def resplit(data: dict, seed: int, regions: int | None = None, min_size: int = 3) -> dict:
    """The nodes of a multi-region file dealt into ``regions`` regions (default: as many as the file
    has) of random sizes (at least ``min_size``), links re-drawn where a pair's relation changes."""
    rng = random.Random(f"regions-{data.get('name')}-{seed}")
    old = {n["index"]: n.get("partition") for n in data["nodes"]}
    if None in old.values():
        raise ValueError("resplit needs a multi-region file")
    R = regions or len(set(old.values()))
    ix = sorted(old)
    while True:
        cuts = sorted(rng.sample(range(1, len(ix)), R - 1))
        sizes = [b - a for a, b in zip([0] + cuts, cuts + [len(ix)])]
        if min(sizes) >= min_size:
            break
    order = ix[:]
    rng.shuffle(order)
    new, pos = {}, 0
    for r, s in enumerate(sizes):
        for a in order[pos:pos + s]:
            new[a] = r
        pos += s
    out = _derived(data, f"{data.get('name')}-regions{seed}",
                   f"nodes dealt into {R} regions of {sizes} nodes, seed {seed}")
    for n in out["nodes"]:
        n["partition"] = new[n["index"]]
    pairs, intra, inter = _node_links(data)
    links = [e for e in out["links"] if e["a"] in (SOURCE, SINK) or e["b"] in (SOURCE, SINK)]
    for a_i, a in enumerate(ix):
        for b in ix[a_i + 1:]:
            e = pairs.get(frozenset((a, b)))
            same_old, same_new = old[a] == old[b], new[a] == new[b]
            if e is not None and same_old == same_new:
                links.append(copy.deepcopy(e))
            else:
                links.append(_link(out, a, b, rng.choice(intra if same_new else inter)))
    out["links"] = links
    return out


def gpu_mix(data: dict, seed: int, mix: dict[str, int]) -> dict:
    """The cluster with ``mix[t]`` nodes of each GPU type: extra nodes dropped at random, missing ones
    cloned from a random node of the type (new indices after the largest)."""
    rng = random.Random(f"mix-{data.get('name')}-{seed}-{sorted(mix.items())}")
    out = _derived(data, f"{data.get('name')}-mix" + "-".join(f"{mix[t]}{t}" for t in sorted(mix)),
                   f"GPU mix {mix} (profiles of the shipped composition), seed {seed}")
    by: dict[str, list[int]] = {}
    for n in out["nodes"]:
        by.setdefault(n["gpu_type"], []).append(n["index"])
    keep = set()
    for t, ixs in by.items():
        keep |= set(rng.sample(ixs, min(len(ixs), mix.get(t, 0))))
    clones: list[tuple[int, int]] = []  # (new index, template)
    nxt = max(n["index"] for n in out["nodes"]) + 1
    for t, want in mix.items():
        for _ in range(want - len(by.get(t, []))):
            clones.append((nxt, rng.choice(by[t])))
            nxt += 1
    nodes = {n["index"]: n for n in out["nodes"]}
    pairs, intra, _ = _node_links(data)
    template = dict(clones)
    for new, tpl in clones:
        n = copy.deepcopy(nodes[tpl])
        n["index"], n["name"] = new, f"ComputeNode-{new}"
        n["simulator_name"] = f"compute_node_{new + 2}"
        out["nodes"].append(n)
        for e in data["links"]:  # its source and sink links: the template's
            if tpl in (e["a"], e["b"]) and (SOURCE in (e["a"], e["b"]) or SINK in (e["a"], e["b"])):
                c = copy.deepcopy(e)
                c["a"], c["b"] = (new if e["a"] == tpl else e["a"]), (new if e["b"] == tpl else e["b"])
                out["links"].append(c)
        # node-node links: as between the templates; a clone and its template (or two clones of one
        # node) share a region, so they get a link drawn from the file's intra-region ones
        others = [a for a in nodes if a in keep] + [c for c, _ in clones if c < new]
        for other in others:
            t2 = template.get(other, other)
            like = pairs[frozenset((tpl, t2))] if t2 != tpl else rng.choice(intra)
            out["links"].append(_link(out, other, new, like))
    keep |= set(template)
    _keep_nodes(out, keep)
    if not placeable(out):
        raise ValueError(f"GPU mix {mix} cannot hold every model")
    return out


def tiny(data: dict, seed: int, nodes: int = 4, layers: int = 4, max_layers: int = 2,
         spread: float = 0.03) -> dict:
    """A held-out cluster small enough for an exhaustive search (tests): ``nodes`` random nodes of the
    file (from at least two regions where it has several), each model cut to its first ``layers``
    layers, every node to at most ``max_layers`` of them (the first entries of its own table), and the
    capacities perturbed as :func:`perturbed` does. Links between the kept nodes keep their capacities."""
    rng = random.Random(f"tiny-{data.get('name')}-{seed}")
    regions = {n.get("partition") for n in data["nodes"]}
    for _ in range(1000):
        keep = set(rng.sample([n["index"] for n in data["nodes"]], nodes))
        kept_regions = {n.get("partition") for n in data["nodes"] if n["index"] in keep}
        if len(kept_regions) >= min(2, len(regions)):
            break
    out = _derived(perturbed(data, seed, spread), f"{data.get('name')}-tiny{seed}",
                   f"{nodes} nodes, {layers} layers, at most {max_layers} per node, seed {seed}")
    _keep_nodes(out, keep)
    for m in out["models"].values():
        m["num_layers"] = layers
        m.pop("compute_upper_bound_tokens_per_s", None)
    for n in out["nodes"]:
        for t in n["throughput"].values():
            k = min(t["max_num_layers"], max_layers)
            t["max_num_layers"] = k
            for key in ("capacity_tokens_per_s", "prompt_tokens_per_s", "decode_tokens_per_s"):
                if key in t:
                    t[key] = {str(j): t[key][str(j)] for j in range(1, k + 1)}
    if not placeable(out):
        raise ValueError("the tiny cluster cannot hold the model")
    return out


#: the GPU mixes tried (both files), beside the shipped 4 A100 / 8 L4 / 12 T4
MIXES = ({"A100": 2, "L4": 10, "T4": 12}, {"A100": 6, "L4": 6, "T4": 12})
KINDS = ("perturb", "sub", "regions", "mix")


def heldout_cases(folder: str, kinds=KINDS, seeds=(0,)) -> list[tuple[str, str, dict]]:
    """``(kind, name, decoded cluster)`` for every held-out cluster of ``kinds`` and ``seeds``."""
    raw = {name: load_raw(folder, name) for name in ("single24", "3cluster24")}
    out = []
    for kind in kinds:
        for seed in seeds:
            for name, data in raw.items():
                if kind == "perturb":
                    out.append((kind, f"{name}-perturb{seed}", perturbed(data, seed)))
                elif kind == "sub":
                    out.append((kind, f"{name}-sub{seed}", subcluster(data, seed)))
                elif kind == "regions" and name == "3cluster24":
                    for R in (3, 2) if seed == 0 else (3,):
                        c = resplit(data, seed, regions=R)
                        out.append((kind, c["name"] + ("" if R == 3 else f"-{R}r"), c))
                elif kind == "mix" and seed == 0:
                    for mix in MIXES:
                        c = gpu_mix(data, seed, mix)
                        out.append((kind, c["name"], c))
    return out
