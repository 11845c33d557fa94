"""A synthetic transformer-like layer graph in the reference format, made by the project itself.

The example the README places: ``layers`` encoder blocks (Q/K/V projections in parallel, attention,
output projection, residual add, layer norm, two MLP layers, residual add, layer norm) between an
embedding and a head. Costs follow from the layer widths with a simple FLOP model on a CPU core and on
an accelerator 12x faster; communication is the activation size over a 12 GB/s link. Deterministic, so
results are reproducible. One run of the graph processes ``batch`` sequences of ``seq`` tokens, and
that run is the workload's "sample": the document records no ``batch_size`` (a reference-format field),
so its figures print per sample, each sample being one such batch.
"""

from __future__ import annotations

__all__ = ["transformer_layer_graph"]

_BYTES = 4  # fp32


def transformer_layer_graph(layers: int = 6, *, hidden: int = 1024, seq: int = 512, batch: int = 8,
                            accelerators: int = 4, cpus: int = 1, training: bool = False,
                            accelerator_memory: float = 16e9) -> dict:
    """Return a reference-format workload document (``maxFPGAs``, ``nodes``, ``edges``...). Times in ms."""
    if layers < 1:
        raise ValueError("layers must be at least 1")
    tokens = batch * seq
    act_bytes = tokens * hidden * _BYTES
    acc_flops, cpu_flops = 12e12, 1e12  # FLOP/s
    link = 12e9  # bytes/s

    nodes: list[dict] = []
    edges: list[tuple[int, int]] = []

    def add(name: str, flops: float, params: int, out_bytes: float) -> int:
        nid = len(nodes) + 1
        nodes.append({
            "id": nid, "name": name, "layerId": nid,
            "cpuLatency": round(1e3 * flops / cpu_flops, 6),
            "fpgaLatency": round(1e3 * flops / acc_flops, 6),
            "supportedOnFpga": 1, "isBackwardNode": 0, "colorClass": nid,
            "size": float(params * _BYTES * (4 if training else 1) + out_bytes),
            "_out": out_bytes,
        })
        return nid

    def linear(name, inp, fan_in, fan_out):
        nid = add(name, 2 * tokens * fan_in * fan_out, fan_in * fan_out + fan_out, tokens * fan_out * _BYTES)
        edges.append((inp, nid))
        return nid

    prev = add("embedding", tokens * hidden, 30522 * hidden, act_bytes)
    for i in range(layers):
        p = f"layer{i}."
        q = linear(p + "query", prev, hidden, hidden)
        k = linear(p + "key", prev, hidden, hidden)
        v = linear(p + "value", prev, hidden, hidden)
        att = add(p + "attention", 4 * batch * seq * seq * hidden, 0, act_bytes)
        edges += [(q, att), (k, att), (v, att)]
        proj = linear(p + "attn_out", att, hidden, hidden)
        res1 = add(p + "residual1", tokens * hidden, 0, act_bytes)
        edges += [(proj, res1), (prev, res1)]
        ln1 = add(p + "layernorm1", 5 * tokens * hidden, 2 * hidden, act_bytes)
        edges.append((res1, ln1))
        up = linear(p + "mlp_up", ln1, hidden, 4 * hidden)
        down = linear(p + "mlp_down", up, 4 * hidden, hidden)
        res2 = add(p + "residual2", tokens * hidden, 0, act_bytes)
        edges += [(down, res2), (ln1, res2)]
        prev = add(p + "layernorm2", 5 * tokens * hidden, 2 * hidden, act_bytes)
        edges.append((res2, prev))
    head = linear("head", prev, hidden, hidden)
    del head

    if training:
        nf = len(nodes)
        for nd in list(nodes):
            nodes.append({
                **nd, "id": nd["id"] + nf, "name": nd["name"] + ".grad", "layerId": nd["id"] + nf,
                "cpuLatency": round(2 * nd["cpuLatency"], 6), "fpgaLatency": round(2 * nd["fpgaLatency"], 6),
                "isBackwardNode": 1, "size": 0.0,
            })
        edges += [(d + nf, s + nf) for s, d in edges]

    out_edges = []
    by_id = {nd["id"]: nd for nd in nodes}
    for s, d in edges:
        cost = round(1e3 * by_id[s]["_out"] / link, 6)
        out_edges.append({"sourceId": s, "destId": d, "cost": cost})
    for nd in nodes:
        nd.pop("_out")
    return {
        "maxSizePerFPGA": float(accelerator_memory), "maxFPGAs": int(accelerators), "maxCPUs": int(cpus),
        "nodes": nodes, "edges": out_edges,
    }
