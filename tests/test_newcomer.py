"""What a new user ran into, each now a clear answer: one ``error:`` line and a non-zero exit, never a
traceback, never an option silently ignored."""

from __future__ import annotations

import re

import pytest

from placement.cli import main


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    pytest.importorskip("onnx")
    path = str(tmp_path_factory.mktemp("m") / "model.onnx")
    assert main(["example", path]) == 0
    return path


def _one_error(capsys, *words):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err
    for w in words:
        assert w in err[0], err
    return err[0]


@pytest.mark.parametrize("flags, words", [
    (["--solver", "local-search", "--seed", "-1"], ["--seed", "non-negative"]),
    (["--max-replicas", "0"], ["--max-replicas", "positive"]),
    (["--microbatches", "0"], ["--microbatches", "positive"]),
    (["--schedule", "gpipe", "--max-replicas", "1"],
     ["--schedule", "applies to stage plans", "(--max-replicas 1)"]),
    (["--granularity", "op", "--max-replicas", "1"],
     ["--granularity", "applies to stage plans", "(--max-replicas 1)"]),
    # options a solver does not read were ignored: refused, naming the solvers that read them
    (["--split", "s.json"], ["--split", "expert"]),
    (["--split", "s.json", "--max-replicas", "1"], ["--split", "expert"]),
    (["--restarts", "3"], ["--restarts", "local-search"]),
    (["--restarts", "3", "--max-replicas", "1"], ["--restarts", "local-search"]),
    (["--memory-limit", "1", "--solver", "dp", "--max-replicas", "1"], ["--memory-limit", "auto solver"]),
    # a latency target replaced the named solver without a word
    (["--solver", "pipedream", "--latency-slo", "5"], ["--solver pipedream", "--latency-slo"]),
    (["--solver", "dp", "--latency-slo", "5", "--max-replicas", "1"], ["--solver dp", "--latency-slo"]),
    # an LLM option on an ONNX model that is no decoder named --context instead of itself
    (["--plot", "x.png"], ["--plot applies to an LLM decoder"]),
    # replicas asked of a solver that places one device per stage were dropped without a word
    (["--solver", "ip-noncontig", "--max-replicas", "2"], ["--max-replicas 2", "ip-noncontig", "dp"]),
    # --model on an ONNX model was read as a Helix cluster file
    (["--model", "llama70b"], ["--model applies to Helix cluster files", "an ONNX model"]),
])
def test_place_refuses_bad_or_inapplicable_options(model, capsys, flags, words):
    assert main(["place", model, "--devices", "a100:2", *flags]) == 2
    _one_error(capsys, *words)


def test_evaluate_with_its_arguments_swapped_says_so(model, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["place", model, "--devices", "a100:2", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(out), model]) == 2
    _one_error(capsys, "WORKLOAD RESULT", f"placement evaluate {model} {out}")


@pytest.mark.parametrize("flags", [[], ["--max-replicas", "1"]])
def test_evaluate_of_another_models_plan_names_the_mismatch(model, tmp_path, capsys, flags):
    """A plan of a 2-layer model evaluated on the 3-layer one printed an empty table, INVALID."""
    bigger = str(tmp_path / "b3.onnx")
    assert main(["example", bigger, "--layers", "3"]) == 0
    out = tmp_path / "r.json"
    assert main(["place", model, "--devices", "a100:1,t4:1", "-o", str(out), *flags]) == 0
    capsys.readouterr()
    assert main(["evaluate", bigger, str(out)]) == 2
    _one_error(capsys, "does not match the workload", "another model")
    assert main(["evaluate", model, str(out)]) == 0  # its own model scores it


def test_bench_with_no_workloads_is_an_error_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "results"
    assert main(["bench", "--workloads", str(tmp_path / "none"), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "error: no workloads found" in err
    assert not out.exists() or not any(p.suffix in (".md", ".csv") for p in out.rglob("*"))


def test_a_baseline_with_no_placement_is_unknown_not_feasible(tmp_path, capsys):
    """local-search or partition finding nothing used to report 'feasible' with max_load null."""
    from graphs import Cluster, DeviceKind, Node, OpGraph
    from solvers.base import SolveOptions, Status
    from solvers.registry import solve

    # two nodes that each fill a device: no device holds both, and there is one device
    g = OpGraph.from_nodes([Node("a", {"gpu": 1.0}, memory=3.0), Node("b", {"gpu": 1.0}, memory=3.0)],
                           [("a", "b")])
    cl = Cluster((DeviceKind("gpu", 1, memory=4.0),))
    for name in ("local-search", "partition", "single", "pipedream"):
        sol = solve(g, cl, solver=name, options=SolveOptions(time_limit=5))
        assert sol.assignment is None and sol.status is Status.UNKNOWN, (name, sol.status)
    exact = solve(g, cl, solver="dp")
    assert exact.status is Status.INFEASIBLE


def test_a_batch_plan_is_labelled_per_batch(model, capsys):
    """``place --batch-size 8`` prints one batch's latency: before, it said 'one sample'. A stage plan
    (replicas, the default) divides its times by the batch: they are per sample, and say so."""
    assert main(["place", model, "--devices", "a100:2", "--batch-size", "8", "--max-replicas", "1"]) == 0
    out = capsys.readouterr().out
    assert "(one batch of 8 samples, latency model)" in out and "(one sample" not in out
    batch = float(re.search(r"max-load ([\d.]+) ms", out).group(1))
    assert main(["place", model, "--devices", "a100:1", "--batch-size", "8"]) == 0
    one = float(re.search(r"max-load ([\d.]+) ms per sample", capsys.readouterr().out).group(1))
    assert main(["place", model, "--devices", "a100:1", "--batch-size", "8", "--max-replicas", "1"]) == 0
    single = float(re.search(r"max-load ([\d.]+) ms", capsys.readouterr().out).group(1))
    assert one == pytest.approx(single / 8, rel=1e-3) and batch > 0  # one A100: the batch's time / 8


def test_show_of_a_batch_plan_says_per_batch(model, tmp_path, capsys):
    out = tmp_path / "b8.json"
    assert main(["place", model, "--devices", "a100:2", "--batch-size", "8", "--max-replicas", "1",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["show", str(out), "--no-draw"]) == 0
    text = capsys.readouterr().out
    assert "per batch (8 samples)" in text and "one-batch latency" in text and "per sample" not in text


def test_inspect_prints_the_binary_units_of_place(model, capsys):
    """inspect printed decimal MB where place prints MiB: one unit for memory everywhere."""
    assert main(["inspect", model]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("parameters:"))
    count = int(re.match(r"parameters: ([\d,]+)", line).group(1).replace(",", ""))
    assert f"{count * 4 / 2**20:.2f} MiB" in line, line  # float32 weights, 2**20 bytes a MiB
    assert not re.search(r"\d (KB|MB|GB)\b", out), out


def test_inspect_of_a_training_graph_says_which_pass_each_figure_counts(model, capsys):
    """inspect --training printed the file's forward operators and FLOPs, then "(N operators after
    constant folding)" with N twice that, and training times under "ms per run": now each figure says
    which pass it counts, and the operators add up: the forward ones and as many backward twins."""
    assert main(["inspect", model]) == 0
    plain = capsys.readouterr().out
    forward = int(re.search(r"^operators: (\d+)", plain, re.M).group(1))
    assert f"({forward} operators after constant folding;" in plain
    assert main(["inspect", model, "--training"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^FLOPs: [\d.]+ G per run \(the forward pass\)$", out, re.M), out
    assert "ms per run, forward and backward):" in out
    assert f"({2 * forward} operators in the costed graph: the {forward} of the forward pass after " \
           f"constant folding, and their backward twins;" in out


def test_show_of_a_stage_plan_honours_the_front_end_options(model, tmp_path, capsys):
    """show re-scored a stage plan with the settings it records whatever --batch-size, --costs or
    --devices said; now they re-cost it as evaluate does, or are refused by name."""
    import json

    out = tmp_path / "r.json"
    assert main(["place", model, "--devices", "a100:1,t4:1", "-o", str(out)]) == 0
    capsys.readouterr()

    def model_time(*flags):
        assert main(["show", str(out), "--no-draw", "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out)["simulation"]["model_time_per_sample"]

    def evaluated(*flags):
        assert main(["evaluate", model, str(out), "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out)["max_load"]

    own, four = model_time(), model_time("--batch-size", "4")
    assert own == pytest.approx(evaluated(), rel=1e-12)
    assert four == pytest.approx(evaluated("--batch-size", "4"), rel=1e-12)
    assert four < own * 0.9  # batch 4 costs less per sample than batch 1 here: the option was read
    assert main(["show", str(out), "--no-draw", "--devices", "a100:2"]) == 2
    _one_error(capsys, "unknown device kind 't4'")


_LLAMA = {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
          "num_key_value_heads": 32, "vocab_size": 32000, "torch_dtype": "float16"}


@pytest.mark.parametrize("goodput", [False, True])
def test_show_reads_a_model_configs_plans(tmp_path, capsys, goodput):
    """show said "a stage plan is rebuilt from its Piper-format workload or ONNX model" for an LLM's
    decode plan, throughput or goodput: it simulates them now, at the evaluator's time per token."""
    import json

    cfg, out = tmp_path / "llama.json", tmp_path / "r.json"
    cfg.write_text(json.dumps(_LLAMA))
    extra = []
    if goodput:
        mix = tmp_path / "mix.json"
        mix.write_text(json.dumps({"buckets": [{"input": 256, "output": 128, "weight": 1}]}))
        extra = ["--objective", "goodput", "--requests", str(mix), "--ttft-slo", "300", "--tpot-slo", "40"]
    assert main(["place", str(cfg), "--devices", "a100:2,t4:2", "--batch-size", "8", "-o", str(out),
                 *extra]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(cfg), str(out), "--json"]) == 0
    want = json.loads(capsys.readouterr().out)["max_load"]
    assert main(["show", str(out), "--no-draw", "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)["simulation"]
    assert sim["schedule"] == "stream" and sim["model_time_per_sample"] == pytest.approx(want, rel=1e-12)
    assert main(["show", str(out), "--no-draw"]) == 0
    assert "ms per token;" in capsys.readouterr().out  # a decode step serves a token per sequence
    assert main(["show", str(out), "--no-draw", "--costs", "roofline"]) == 2
    _one_error(capsys, "--costs does not apply to a model config")


def test_replicas_on_a_reference_format_graph_are_refused_not_dropped(tmp_path, capsys):
    tiny = str(tmp_path / "tiny.json")
    assert main(["example", tiny]) == 0
    capsys.readouterr()
    assert main(["place", tiny, "--max-replicas", "2"]) == 2
    _one_error(capsys, "--max-replicas 2", "reference-format", "one device per stage")
    assert main(["place", tiny, "--max-replicas", "1"]) == 0  # what it does anyway


def test_cluster_durations_of_onnx_jobs_read_in_hours(model, tmp_path, capsys):
    """Cluster times printed as 2.283e+05 ms; durations over an hour now read in hours, by hand from the
    job's own time per sample."""
    import json

    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps({"cluster": {"devices": "a100:2"},
                                "jobs": [{"model": model, "samples": 10**8}]}))
    assert main(["cluster", str(jobs)]) == 0
    out = capsys.readouterr().out
    assert "JCT h" in out and "durations in hours" in out and not re.search(r"\de\+\d", out), out
    row = next(x.split() for x in out.splitlines() if x.startswith("job0"))
    per_sample_ms, jct_h = float(row[4]), float(row[6])
    assert jct_h == pytest.approx(per_sample_ms * 10**8 / 3.6e6, rel=1e-3)


_BENCH = ["bench", "--config", "tiny", "--only", "bert24", "--quiet", "--out", "{tmp}/bt"]
_SPLIT = ["split", "{model}", "{result}", "--out-dir", "{tmp}/s"]


@pytest.mark.parametrize("argv, words", [
    # a path under a regular file: a traceback after the work, or a wrong reason ("File exists")
    (["bench", "--config", "tiny", "--only", "bert24", "--solvers", "single", "--quiet", "--out", "{file}/b"],
     ["--out", "is a file, not a folder"]),
    (["bench", "--config", "tiny", "--only", "bert24", "--solvers", "single", "--quiet", "--out", "{tmp}/bt",
      "--report", "{file}/r.md"], ["--report", "is a file, not a folder"]),
    (["cluster", "{jobs}", "--plot", "{file}/o.png"], ["--plot", "is a file, not a folder"]),
    (["cluster", "simulate", "{jobs}", "--plot", "{file}/o.png"], ["--plot", "is a file, not a folder"]),
    (["cluster", "{jobs}", "--out", "{file}/o.json"], ["--out", "is a file, not a folder"]),
    (["calibrate", "cpu", "-o", "{file}/c.toml"], ["--out", "is a file, not a folder"]),
    # bad values that ran
    (_BENCH + ["--workers", "0"], ["--workers"]),
    (_BENCH + ["--time-limit", "-1"], ["--time-limit"]),
    (_BENCH + ["--limit", "single=-2"], ["--limit"]),
    (_SPLIT + ["--verify", "--tolerance", "-1"], ["--tolerance"]),
    # options that did nothing without the one they belong to
    (_SPLIT + ["--seed", "3"], ["--seed", "--verify"]),
    (_SPLIT + ["--tolerance", "0.1"], ["--tolerance", "--verify"]),
    (_SPLIT + ["--dim", "seq=4"], ["--dim", "--verify"]),  # it shaped the check's inputs only: ignored
    (_SPLIT + ["--verify", "--seed", "-5"], ["--seed", "non-negative"]),  # numpy's traceback, files written
    (["run", "{model}", "{result}", "--seed", "-1"], ["--seed", "non-negative"]),
    (["cluster", "{jobs}", "--policy", "ftf", "--base", "las"], ["--base las", "Synergy"]),
    # the default base given by name was taken as not given
    (["cluster", "simulate", "{jobs}", "--policy", "ftf", "--base", "fifo"], ["--base fifo", "Synergy"]),
])
def test_outputs_and_values_are_checked_before_any_work(model, tmp_path, capsys, argv, words):
    file = tmp_path / "notes.txt"
    file.write_text("hi")
    jobs, result = str(tmp_path / "jobs.json"), str(tmp_path / "r.json")
    assert main(["example", jobs]) == 0
    if "{result}" in argv:
        assert main(["place", model, "--devices", "a100:1,t4:1", "-o", result]) == 0
    capsys.readouterr()
    argv = [a.format(file=file, tmp=tmp_path, jobs=jobs, model=model, result=result) for a in argv]
    assert main(argv) == 2
    _one_error(capsys, *words)
    assert not (tmp_path / "s").exists()  # nothing written


def test_threads_on_the_default_path_is_honoured(model, tmp_path, capsys):
    """--threads 1, whose help names the DP's default, was refused on the default (stage model) path."""
    assert main(["place", model, "--devices", "a100:1,t4:1", "--threads", "1", "--json"]) == 0
    assert '"status": "optimal"' in capsys.readouterr().out


@pytest.mark.parametrize("flags", [["--context", "100"], ["--disaggregate"]])
def test_llm_options_on_other_workloads_are_refused(tmp_path, capsys, flags):
    tiny = str(tmp_path / "tiny.json")
    assert main(["example", tiny]) == 0
    capsys.readouterr()
    assert main(["place", tiny, *flags]) == 2
    _one_error(capsys, f"{flags[0]} applies to an LLM")


def test_goodput_summary_names_the_batches_whose_plan_is_not_the_dps(tmp_path, capsys):
    """The best row said 'not the DP's plan (more goodput)' and the closing line 'each plan is the
    decode DP's': now the line names the batch sizes where another plan was kept."""
    import json

    cfg, mix, out = tmp_path / "llama.json", tmp_path / "chat.json", tmp_path / "g.json"
    cfg.write_text(json.dumps(_LLAMA))
    mix.write_text(json.dumps({"buckets": [{"input": 256, "output": 128, "weight": 5},
                                           {"input": 1024, "output": 256, "weight": 3},
                                           {"input": 4096, "output": 256, "weight": 1}]}))
    assert main(["place", str(cfg), "--devices", "a100:2,t4:4", "--objective", "goodput", "--requests",
                 str(mix), "--ttft-slo", "300", "--tpot-slo", "40", "--batch-size", "8,16,32",
                 "-o", str(out)]) == 0
    text = capsys.readouterr().out
    rows = {int(x.split()[0]): x for x in text.splitlines() if x[:1].isdigit()}
    not_dp = [b for b, row in rows.items() if "not the solver's plan" in row]
    line = next(x for x in text.splitlines() if x.startswith("proven:"))
    for b in not_dp:
        assert f"batch {b}" in line.split("except at")[1], line
    if not not_dp:
        assert "except" not in line


def test_a_device_mismatch_lists_the_cluster_by_its_names(model):
    """The cluster was listed as 'cpu:0, cpu0': every device twice, once in an old spelling."""
    from graphs.errors import InputError
    from placement.load import load_workload
    from placement.results import assignment_from_result

    w = load_workload(model, devices="cpu:2")
    doc = {"devices": [{"name": "gpu:3", "nodes": list(w.graph.names)}]}
    with pytest.raises(InputError) as e:
        assignment_from_result(doc, w.graph, w.cluster)
    assert "gpu:3 not in the cluster (cpu:0, cpu:1)" in str(e.value)


def test_a_latency_below_the_max_load_is_explained(model, capsys):
    """One CPU core: the latency (47.9 ms) printed below the max-load (57.0 ms) with no word why."""
    assert main(["place", model, "--devices", "cpu:1", "--max-replicas", "1"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"max-load ([\d.]+) ms per sample \([\d,.]+ samples/s\), latency ([\d.]+) ms", out)
    assert m and float(m[2]) < float(m[1])
    assert "latency below the max-load: the latency model runs a host CPU's independent operators" in out
    assert main(["place", model, "--devices", "a100:1", "--max-replicas", "1"]) == 0
    assert "latency below the max-load" not in capsys.readouterr().out  # one accelerator: latency = load


@pytest.mark.parametrize("out, flags, words", [
    ("m.onnx", ["--training"], ["--training shapes a reference-format layer graph", "with --training"]),
    ("m.onnx", ["--accelerators", "2"], ["--accelerators", "--devices"]),
    ("m.onnx", ["--cpus", "3"], ["--cpus", "an ONNX model"]),
    ("jobs.json", ["--layers", "3"], ["--layers shapes a model example", "job list"]),
    ("jobs.json", ["--training"], ["--training", "job list"]),
])
def test_example_refuses_options_that_do_not_shape_its_kind(tmp_path, capsys, out, flags, words):
    """example m.onnx --training wrote an inference model, and jobs.json took --layers, without a word."""
    assert main(["example", str(tmp_path / out), *flags]) == 2
    _one_error(capsys, *words)
    assert not (tmp_path / out).exists()


def test_example_options_shape_the_layer_graph(tmp_path):
    import json

    shape = ["--accelerators", "2", "--layers", "2"]
    assert main(["example", str(tmp_path / "a.json"), *shape, "--cpus", "0"]) == 0
    doc = json.loads((tmp_path / "a.json").read_text())
    assert main(["example", str(tmp_path / "b.json"), *shape, "--training"]) == 0
    trained = json.loads((tmp_path / "b.json").read_text())
    assert len(trained["nodes"]) > len(doc["nodes"])  # the backward twins


def test_subgraphs_per_device_is_the_latency_objectives(model, capsys):
    """--subgraphs-per-device 2 with the max-load objective changed nothing, on every solver."""
    for solver in ("auto", "ip", "dp"):
        assert main(["place", model, "--devices", "a100:2", "--max-replicas", "1", "--solver", solver,
                     "--subgraphs-per-device", "2"]) == 2
        _one_error(capsys, "--subgraphs-per-device applies to the latency objective", "max-load")
    assert main(["place", model, "--devices", "a100:2", "--max-replicas", "1", "--objective", "latency",
                 "--subgraphs-per-device", "2", "--time-limit", "5"]) == 0


def test_auto_says_when_the_backend_it_was_given_did_not_run(model, capsys):
    pytest.importorskip("pulp")
    assert main(["place", model, "--devices", "a100:2", "--max-replicas", "1", "--backend", "pulp"]) == 0
    assert "the integer program (backend pulp) was not needed" in capsys.readouterr().out


def test_a_file_given_in_the_wrong_place_is_named_for_what_it_is(example_onnx, tmp_path, capsys):
    """A second trial's messages: a folder was an "unknown input format '(no suffix)'", an ONNX model
    given to cluster "not a UTF-8 text file", --dim on a reference workload "--dims", and a Helix layout
    given to show "not a placement result" though place --out wrote it."""
    import json

    graph = tmp_path / "g.json"
    graph.write_text(json.dumps({"maxSizePerFPGA": 10, "maxFPGAs": 1, "maxCPUs": 1, "edges": [], "nodes": [
        {"id": 1, "supportedOnFpga": 1, "cpuLatency": 1.0, "fpgaLatency": 1.0, "size": 1}]}))
    layout = tmp_path / "layout.json"
    layout.write_text(json.dumps({"schema": "placement-helix-layout", "version": 1}))
    cases = [(["place", str(tmp_path)], "is a folder; expected a reference-format workload"),
             (["cluster", example_onnx], "this is an ONNX model, not a job list"),
             (["cluster", str(graph)], "this is a reference-format operator graph, not a job list"),
             (["place", str(graph), "--dim", "batch=3"], "--dim only applies to ONNX models"),
             (["show", str(layout)], "this is a Helix layout (written by placement place CLUSTER.json")]
    for argv, words in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, (argv, err)


def test_inspect_refuses_what_its_out_cannot_hold_before_printing(example_onnx, tmp_path, capsys):
    """inspect -o on two accelerator kinds printed the whole summary, then refused the file (the reference
    format holds one accelerator kind): the refusal now comes first, alone."""
    assert main(["inspect", example_onnx, "--devices", "a100:1,t4:1", "-o", str(tmp_path / "x.json")]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "one accelerator kind" in cap.err and not (tmp_path / "x.json").exists()


def test_a_batch_dimension_given_by_name_is_the_batch_size(tmp_path, capsys):
    """run refused --dim batch=1 on a result placed at batch size 1 ("placed with batch not given"), and
    --dim batch=3 with --batch-size 5 warned of a fixed input shape, then failed on something else."""
    pytest.importorskip("onnxruntime")
    model, result = str(tmp_path / "m.onnx"), str(tmp_path / "r.json")
    assert main(["example", model, "--layers", "1"]) == 0
    assert main(["place", model, "--devices", "a100:1,cpu:1", "--out", result]) == 0
    capsys.readouterr()
    assert main(["run", model, result, "--dim", "batch=1"]) == 0  # the recorded batch, restated
    assert "outputs match the whole model: yes" in capsys.readouterr().out
    assert main(["run", model, result, "--dim", "batch=2"]) == 2
    assert "was placed with batch size 1 and its prediction is for that" in capsys.readouterr().err
    assert main(["inspect", model, "--dim", "batch=3", "--batch-size", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "'batch' = 3 (dims / --dim) and batch size 5" in err
    assert "both set the batch; give one of them" in err and "warning" not in err
