"""The command line's promises at the edges (docs/cli.md, "Promises (tested)"): output paths, bad values,
results that evaluate reproduces, paths and permissions of what it writes, help and messages.

In-process through ``main(argv)``; the Ctrl-C promises are in test_promises_interrupt.py.
"""

import json
import os
import re
import stat

import pytest

from placement.cli import main
from tests.tables import one_device_per_stage, table_rows

ROOT = os.path.join(os.path.dirname(__file__), "..")
DEVICES = "a100:2,t4:2,cpu:1"


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("promises") / "model.onnx")
    assert main(["example", path, "--layers", "2"]) == 0
    return path


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("promises") / "w.json")
    assert main(["example", path, "--layers", "2", "--accelerators", "3"]) == 0
    return path


@pytest.fixture(scope="module")
def onnx_result(onnx_model, tmp_path_factory):
    """A one-device-per-stage result (``--max-replicas 1``): the drawings, latency and utilisation
    figures promised below are those of that placement; stage plans with replicas are checked in
    tests/test_onnx_stages.py."""
    out = str(tmp_path_factory.mktemp("promises") / "result.json")
    assert main(["place", onnx_model, "--devices", DEVICES, "--max-replicas", "1", "--out", out]) == 0
    return out


def _one_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# ----------------------------------------------------------------- 3: outputs in missing folders
def test_every_command_that_writes_creates_missing_folders(onnx_model, onnx_result, workload, tmp_path,
                                                           capsys):
    new = tmp_path / "no" / "such" / "dir"
    assert main(["place", workload, "--out", str(new / "a" / "r.json")]) == 0
    assert json.load(open(new / "a" / "r.json"))["valid"]
    assert main(["evaluate", workload, str(new / "a" / "r.json"), "--out", str(new / "b" / "e.json")]) == 0
    assert (new / "b" / "e.json").is_file()
    assert main(["inspect", onnx_model, "-o", str(new / "c" / "g.json")]) == 0
    assert (new / "c" / "g.json").is_file()
    assert main(["example", str(new / "d" / "m.onnx"), "--layers", "1"]) == 0
    assert main(["example", str(new / "e" / "w.json"), "--layers", "1"]) == 0
    assert (new / "d" / "m.onnx").is_file() and (new / "e" / "w.json").is_file()
    assert main(["split", onnx_model, onnx_result, "--out-dir", str(new / "f"),
                 "--annotated", str(new / "g" / "placed.onnx")]) == 0
    assert (new / "f" / "manifest.json").is_file() and (new / "g" / "placed.onnx").is_file()
    assert main(["show", onnx_result, "--out-dir", str(new / "h")]) == 0
    assert (new / "h" / "result.graph.dot").is_file()


UNWRITABLE = "/proc/placement-test/x"  # no folder can be made under /proc, even as root


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
@pytest.mark.parametrize("argv", [
    ["place", "{onnx}", "--devices", DEVICES, "--out", UNWRITABLE + "/r.json"],
    ["place", "{workload}", "--out", UNWRITABLE + "/r.json"],
    ["evaluate", "{workload}", "{result}", "--out", UNWRITABLE + "/r.json"],
    ["inspect", "{onnx}", "-o", UNWRITABLE + "/g.json"],
    ["example", UNWRITABLE + "/m.onnx"],
    ["split", "{onnx}", "{result}", "--out-dir", UNWRITABLE],
    ["split", "{onnx}", "{result}", "--annotated", UNWRITABLE + "/a.onnx", "--out-dir", "{tmp}"],
    ["show", "{result}", "--out-dir", UNWRITABLE],
])
def test_an_unwritable_output_is_one_error_line_before_any_work(argv, onnx_model, onnx_result, workload,
                                                                tmp_path, capsys):
    capsys.readouterr()
    argv = [a.format(onnx=onnx_model, workload=workload, result=onnx_result, tmp=str(tmp_path))
            for a in argv]
    assert main(argv) == 2
    line = _one_error(capsys)
    assert "placement-test" in line and "cannot write" in line
    assert capsys.readouterr().out == ""  # nothing solved, printed or written first


def test_an_output_path_that_is_a_folder_is_refused(workload, tmp_path, capsys):
    assert main(["place", workload, "--out", str(tmp_path)]) == 2
    assert "is a folder" in _one_error(capsys)


# ----------------------------------------------------------------- 4: bad values
@pytest.mark.parametrize("extra, words", [
    (["--gap", "-1"], "--gap"),
    (["--gap", "nan"], "--gap"),
    (["--gap", "2"], "--gap must be a relative gap from 0 to 1"),  # (value - bound) / value is at most 1
    (["--threads", "0"], "--threads"),
    (["--threads", "-3"], "--threads"),
    (["--time-limit", "nan"], "--time-limit"),
    (["--time-limit", "-1"], "--time-limit"),
    (["--memory-limit", "0"], "--memory-limit"),
    (["--memory-limit", "nan"], "--memory-limit"),
    (["--restarts", "0", "--solver", "local-search"], "--restarts"),
    (["--subgraphs-per-device", "0"], "--subgraphs-per-device"),
    (["--solver", "expert"], "--split"),
])
def test_bad_solve_options_exit_2_naming_the_flag(extra, words, workload, capsys):
    assert main(["place", workload, *extra]) == 2
    line = _one_error(capsys)
    assert words in line and "options.raw" not in line


@pytest.mark.parametrize("extra, words", [
    (["--devices", ""], "--devices"),
    (["--devices", "  "], "--devices"),
    (["--devices", DEVICES, "--optimizer", "sgd"], "--training"),
    (["--devices", DEVICES, "--optimizer", "nesterov"], "invalid choice"),
    (["--devices", DEVICES, "--batch-size", "0"], "--batch-size"),
])
def test_bad_front_end_options_exit_2(extra, words, onnx_model, capsys):
    assert main(["place", onnx_model, *extra]) == 2
    assert words in _one_error(capsys)


def test_a_dimension_the_model_does_not_have_is_a_warning(onnx_model, capsys):
    assert main(["place", onnx_model, "--devices", DEVICES, "--dim", "foo=3"]) == 0
    err = capsys.readouterr().err
    assert re.search(r"warning: .*'foo'.*name no symbolic dimension.*'batch'", err), err


def test_split_warns_about_a_dimension_the_model_does_not_have(onnx_model, onnx_result, tmp_path, capsys):
    assert main(["split", onnx_model, onnx_result, "--out-dir", str(tmp_path), "--dim", "foo=2",
                 "--verify"]) == 0
    assert "warning: --dim foo: no input of the model has such a dimension (batch)" in capsys.readouterr().err


def test_example_refuses_a_file_that_is_neither_onnx_nor_json(tmp_path, capsys):
    assert main(["example", str(tmp_path / "foo.txt")]) == 2
    assert ".onnx" in _one_error(capsys) and not (tmp_path / "foo.txt").exists()


def test_optimizer_choices_are_those_of_the_training_model():
    from graphs.training import OPTIMIZERS
    from placement.cli.common import OPTIMIZERS as CLI_OPTIMIZERS

    assert set(CLI_OPTIMIZERS) == set(OPTIMIZERS)


# ----------------------------------------------------------------- 5: evaluate reads what place writes
DEVICE_FILE = '[devices.tiny]\nbase = "t4"\nmemory_gib = 1\ncount = 2\n'


@pytest.mark.parametrize("case", ["onnx", "onnx-training", "onnx-device-file", "onnx-latency", "reference",
                                  "reference-latency", "non-contiguous"])
def test_evaluate_reproduces_every_result_place_writes(case, onnx_model, workload, tmp_path, capsys):
    model = workload if case.startswith("reference") or case == "non-contiguous" else onnx_model
    place = {
        "onnx": ["--devices", DEVICES, "--batch-size", "2"],
        "onnx-training": ["--devices", "a100:2,cpu:1", "--training", "--optimizer", "sgd"],
        "onnx-device-file": ["--devices", "tiny:2,cpu:1", "--device-file", str(tmp_path / "d.toml")],
        "onnx-latency": ["--devices", "a100:2,cpu:1", "--objective", "latency", "--solver", "greedy-latency"],
        "reference": [],
        "reference-latency": ["--objective", "latency", "--solver", "greedy-latency"],
        "non-contiguous": ["--solver", "local-search", "--restarts", "2"],
    }[case]
    (tmp_path / "d.toml").write_text(DEVICE_FILE)
    out = str(tmp_path / "r.json")
    assert main(["place", model, *place, "--out", out]) == 0
    res = json.load(open(out))
    capsys.readouterr()
    assert main(["evaluate", model, out, "--json"]) == 0  # the result records its front-end options
    ev = json.loads(capsys.readouterr().out)
    if res["model"] == "stages":  # an ONNX model: the stage model (replicas) by default
        assert ev["valid"] and ev["objective"] == res["objective"]  # exactly
        assert [s["time_per_sample"] for s in ev["stages"]] == [s["time_per_sample"] for s in res["stages"]]
        return
    assert ev["valid"] and ev["max_load"] == res["max_load"]  # exactly
    assert [d["load"] for d in ev["devices"]] == [d["load"] for d in res["devices"]]


def test_evaluate_still_reads_reference_splits(workload, tmp_path, capsys):
    out = str(tmp_path / "r.json")
    assert main(["place", workload, "--out", out]) == 0
    res = json.load(open(out))
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"fpgas": res["fpgas"], "cpus": res["cpus"]}))
    capsys.readouterr()
    assert main(["evaluate", workload, str(split), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_load"] == res["max_load"]


# ----------------------------------------------------------------- what results look like on disk
def test_result_files_get_the_umask_and_paths_relative_to_themselves(workload, tmp_path, monkeypatch, capsys):
    old = os.umask(0o022)
    try:
        out = tmp_path / "results" / "r.json"
        assert main(["place", workload, "--out", str(out)]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o644
    res = json.load(open(out))
    assert not os.path.isabs(res["workload"])
    assert os.path.samefile(os.path.join(out.parent, res["workload"]), workload)
    # show finds the workload from any working directory
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["show", str(out), "--no-draw"]) == 0


def test_inspect_writes_only_when_asked(onnx_model, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["inspect", onnx_model]) == 0
    assert os.listdir(tmp_path) == []
    text = capsys.readouterr().out
    assert "after constant folding" in text


# ----------------------------------------------------------------- what a newcomer reads
def test_version_is_the_package_version(capsys):
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        version = re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1)
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"placement {version}"


def _help(argv, capsys) -> str:
    assert main([*argv, "--help"]) == 0
    return " ".join(capsys.readouterr().out.split())


def test_help_gives_defaults_and_documents_every_option(capsys):
    text = _help(["place"], capsys)
    for flag in ("--time-limit", "--threads", "--seed", "--restarts", "--gap"):
        entry = text[text.rindex(flag + " "):][len(flag):]  # the option's help, up to the next option
        entry = entry[:re.search(r" --[a-z]|$", entry).start()]
        assert "(default" in entry, flag
    assert "sgd, momentum, adagrad, rmsprop, adam, adamw" in text
    assert "transformer layers" in _help(["example"], capsys)


def test_the_place_table_labels_units_and_columns(onnx_model, capsys):
    assert main(["place", onnx_model, "--devices", DEVICES]) == 0  # replicas: one row per stage
    text = capsys.readouterr().out
    columns = ("stage  devices", "compute (ms/sample)", "comm in (ms/sample)", "comm out (ms/sample)",
               "resync (ms/sample)", "load (ms/sample)", "memory / device", "load/max")
    for column in columns:
        assert column in text
    assert not one_device_per_stage(text)
    stage_rows = table_rows(text)
    assert "/ 40 GiB" in text and re.search(r"max-load [\d.]+ ms per sample \([\d,.]+ samples/s\)", text)
    assert main(["place", onnx_model, "--devices", DEVICES, "--max-replicas", "1"]) == 0  # one per device
    text = capsys.readouterr().out
    for column in columns:  # the same table
        assert column in text
    assert one_device_per_stage(text)
    pipeline = table_rows(text)
    assert list(pipeline[0]) == [h for h in stage_rows[0] if h not in ("variants", "y")]
    for rows in (stage_rows, pipeline):  # each row's load is its parts' sum, the busiest one's 100%
        for r in rows:
            parts = sum(float(r[f"{c} (ms/sample)"]) for c in ("compute", "comm in", "comm out", "resync"))
            assert float(r["load (ms/sample)"]) == pytest.approx(parts, rel=1e-5, abs=1e-6)
        top = max(float(r["load (ms/sample)"]) for r in rows)
        assert [r["load/max"] for r in rows if float(r["load (ms/sample)"]) == top][0] == "100.0%"
    assert "/ 40 GiB" in text and "/ 16 GiB" in text  # A100-40GB and T4 as their spec sheets say
    assert re.search(r"latency [\d.]+ ms \(one sample, latency model\)", text)
    # at batch 8 one device per stage gives figures per run of the batch, the stage model per sample: the
    # heads say which (the loads of a batch are about 8 x a sample's, so the two could not be told apart)
    assert main(["place", onnx_model, "--devices", DEVICES, "--max-replicas", "1", "--batch-size", "8"]) == 0
    text = capsys.readouterr().out
    assert "load (ms/batch)" in table_rows(text)[0] and "per batch of 8" in text


def test_infeasible_messages_use_the_tables_units(tmp_path, capsys):
    wl = tmp_path / "w.json"
    wl.write_text(json.dumps({
        "maxSizePerFPGA": 2 ** 30, "maxFPGAs": 1, "maxCPUs": 0,
        "nodes": [{"id": 1, "supportedOnFpga": 1, "cpuLatency": 1.0, "fpgaLatency": 1.0,
                   "size": 3 * 2 ** 30}],
        "edges": []}))
    assert main(["place", str(wl)]) == 1
    cap = capsys.readouterr()
    line = cap.err
    assert "3 GiB" in line and "1 GiB" in line and "bytes" not in line
    # said once: the error line; the summary on stdout said it again, in raw bytes
    assert "status infeasible" in cap.out and "no device can hold" not in cap.out and "bytes" not in cap.out


def test_no_eta_before_it_means_something():
    import io

    from placement.outputs import Progress as _Progress

    buf = io.StringIO()
    p = _Progress("placing", stream=buf, enabled=True)
    p(0.001)
    assert "%" in buf.getvalue() and "ETA" not in buf.getvalue()


def test_progress_bar_never_goes_backwards():
    """A solver whose steps each report their own fraction (a coarsening level after another): the bar
    shows the most reached so far, within [0, 1]."""
    import io

    from placement.outputs import Progress

    buf = io.StringIO()
    p = Progress("placing", stream=buf, enabled=True)
    for frac in (0.6, 0.2, 1.5):
        p.last = 0.0  # draw every call (the bar draws at most every 0.2 s)
        p(frac)
    shown = [float(x) for x in re.findall(r"(\d+\.\d)%", buf.getvalue())]
    assert shown == [60.0, 60.0, 100.0], shown


def test_run_takes_model_then_result_like_split(onnx_model, onnx_result, capsys):
    assert main(["run", onnx_model, onnx_result, "--samples", "2", "--json"]) == 0
    assert "deprecated" not in capsys.readouterr().err
    assert main(["run", onnx_result, onnx_model, "--samples", "2", "--json"]) == 0
    assert "MODEL RESULT" in capsys.readouterr().err  # the older order, with a note


def test_one_device_naming_scheme_and_older_results_still_read(onnx_model, workload, tmp_path, capsys):
    out = str(tmp_path / "r.json")
    assert main(["place", workload, "--out", out]) == 0
    res = json.load(open(out))
    names = [d["name"] for d in res["devices"]]
    assert all(re.fullmatch(r"[a-z0-9-]+:\d+", n) for n in names), names  # accelerator:0, cpu:0
    # a result written before (accelerator0, cpu0) still evaluates to the same value
    for d in res["devices"]:
        d["name"] = d["name"].replace(":", "")
    old = tmp_path / "old.json"
    old.write_text(json.dumps(res))
    capsys.readouterr()
    assert main(["evaluate", workload, str(old), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_load"] == res["max_load"]


def test_split_verify_with_weights_fed_once_still_catches_a_wrong_stage(onnx_model, onnx_result):
    import onnx

    from graphs.onnx_loader import read_model
    from placement.onnx_export import split_model, verify_split
    from placement.results import read_result

    model = read_model(onnx_model, load_external_data=True)
    split = split_model(model, read_result(onnx_result))
    models = [s.model for s in split.submodels]
    rep = verify_split(model, models, split.manifest())
    assert rep.ok and rep.materialized > 0 and rep.worst == 0.0
    wrong = []
    changed = False
    for m in models:
        m2 = onnx.ModelProto()
        m2.CopyFrom(m)
        for n in m2.graph.node:
            if not changed and n.op_type == "Add":
                n.op_type, changed = "Sub", True
        wrong.append(m2)
    assert changed
    assert not verify_split(model, wrong, split.manifest()).ok


def test_cluster_help_documents_the_job_list_and_its_example_parses(tmp_path, capsys):
    from placement.cluster.command import JOBS_FORMAT
    from placement.cluster.formats import parse_jobs

    text = _help(["cluster"], capsys)
    assert "jobs[].model" in text and "host_memory_gb" in text
    example = json.loads(JOBS_FORMAT[JOBS_FORMAT.index("{"):JOBS_FORMAT.index("}]}") + 3])
    jobs = parse_jobs(example, base_dir=str(tmp_path))
    assert [j.name for j in jobs.jobs] == ["resnet", "bert"] and jobs.lease == 600000


def test_bench_is_part_of_the_library_and_benchmarks_is_not_installed(capsys, monkeypatch):
    import sys

    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        include = re.search(r"^include = \[(.*)\]", f.read(), re.M).group(1)
    assert "benchmarks" not in include
    monkeypatch.setitem(sys.modules, "benchmarks", None)  # as if there were no source checkout
    assert main(["bench", "--help"]) == 0
    assert "--seed" in capsys.readouterr().out


def test_show_names_its_columns_and_both_latencies_apart_from_place(onnx_result, capsys):
    assert main(["show", onnx_result, "--no-draw"]) == 0
    text = capsys.readouterr().out
    assert "busy/wall" in text and "load/max" not in text and " util " not in text
    assert re.search(r"one-sample latency [\d.]+ ms in this schedule", text)
    assert re.search(r"the latency model of `place` gives [\d.]+ ms", text)


@pytest.mark.parametrize("command", ["split", "run"])
@pytest.mark.parametrize("plan", ["one device per stage", "stages"])
def test_a_result_of_another_model_is_named_by_split_and_run(onnx_model, onnx_result, tmp_path, capsys,
                                                             command, plan):
    # "error: the result does not match the model: ..." named neither file
    other = str(tmp_path / "other.onnx")
    assert main(["example", other, "--layers", "3"]) == 0
    result = onnx_result
    if plan == "stages":
        result = str(tmp_path / "stages.json")
        assert main(["place", onnx_model, "--devices", DEVICES, "--out", result]) == 0
    capsys.readouterr()
    extra = ["--out-dir", str(tmp_path / "parts")] if command == "split" else ["-n", "2"]
    assert main([command, other, result, *extra]) == 2
    err = _one_error(capsys)
    assert err.startswith(f"error: {result}: the result does not match the model"), err


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_a_stage_model_without_a_plan_still_writes_its_result(example_onnx, tmp_path, capsys, extra):
    """docs/formats.md: a command that finds no plan still writes its --out file. The stage model (an ONNX
    model's default, Piper files, LLM configs) wrote none when no plan fits; it now writes the result of no
    plan, ``infeasible`` (proven here: no node fits 1 MB), and --json prints it."""
    out = tmp_path / "r.json"
    assert main(["place", example_onnx, "--devices", "a100:1", "--device-memory", "1e6", "--out", str(out),
                 *extra]) == 1
    cap = capsys.readouterr()
    assert cap.err.startswith("error: infeasible: ") and cap.err.count("\n") == 1
    doc = json.loads(out.read_text())
    assert doc["status"] == "infeasible" and doc["model"] == "stages" and doc["stages"] == []
    assert "no device can hold" in doc["message"]
    if extra:
        assert json.loads(cap.out) == doc
    assert main(["evaluate", example_onnx, str(out)]) == 2  # a result of no plan: refused in one line
    assert "infeasible" in capsys.readouterr().err


def test_show_json_declares_its_unit_and_lists_each_stages_devices_for_both_plan_forms(onnx_model, tmp_path,
                                                                                          capsys):
    """show --json of a one-device-per-stage result had no time unit (its times are the workload's: ms
    for an ONNX model), and neither form listed a stage's devices and degrees. Both now do, the devices
    as the result file's stages list them."""
    for flags, unit in (([], "s"), (["--max-replicas", "1"], "ms")):
        out = str(tmp_path / f"r{len(flags)}.json")
        assert main(["place", onnx_model, "--devices", DEVICES, "--out", out, *flags]) == 0
        capsys.readouterr()
        assert main(["show", out, "--no-draw", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        stages = json.load(open(out))["stages"]
        assert doc["time_unit"] == unit
        if unit == "ms":  # the one-device-per-stage form's times are per run of the batch: it says which
            assert doc["batch_size"] == 1
        rows = doc["simulation"]["stages"]
        assert [r["devices"] for r in rows] == [s["devices"] for s in stages]
        assert [(r["d"], r["t"]) for r in rows] == [(s["dataParallelDegree"], s["tensorParallelDegree"])
                                                    for s in stages]


def test_a_broken_stage_plans_table_and_messages_name_the_same_stages(onnx_model, tmp_path, capsys):
    """Two plans evaluate flags: one that uses 4 of the 2 A100s, whose devices line counted the devices
    its stages take once each (4 of 5, as if it fitted), and one whose stages come in reverse order,
    whose table numbered its rows by pipeline position while the message named them by plan index."""
    out = str(tmp_path / "r.json")
    assert main(["place", onnx_model, "--devices", DEVICES, "--out", out]) == 0
    capsys.readouterr()
    data = json.load(open(out))
    assert len(data["stages"]) == 2
    a = next(i for i, s in enumerate(data["stages"]) if s["kind"] == "a100")
    over = json.loads(json.dumps(data))
    over["stages"][a]["dataParallelDegree"] = 4
    over["stages"][a]["tensorParallelDegree"] = 1
    over["stages"][a]["devices"] = [f"a100:{i}" for i in range(4)]
    path = tmp_path / "over.json"
    path.write_text(json.dumps(over))
    assert main(["evaluate", onnx_model, str(path)]) == 1
    text = capsys.readouterr().out
    rest = sum(s["dataParallelDegree"] * s["tensorParallelDegree"]
               for i, s in enumerate(data["stages"]) if i != a)
    assert f"2 stage(s) on {4 + rest} of 5 devices" in text and "uses 4 a100 devices, there are 2" in text
    rev = dict(data, stages=data["stages"][::-1])  # an edge of the first stage to the second now goes back
    path = tmp_path / "rev.json"
    path.write_text(json.dumps(rev))
    assert main(["evaluate", onnx_model, str(path)]) == 1
    text = capsys.readouterr().out
    rows = table_rows(text)
    assert [r["stage"] for r in rows] == ["0", "1"]
    assert rows[1]["devices"].split(":")[0] == data["stages"][0]["kind"]  # stage 1: the pipeline's first
    assert "goes from stage 1 back to stage 0" in text
