"""A goodput result read back by ``placement evaluate`` (a new-user review):

* hand edits to the ``goodput`` section (goodput_rps 100, ttft_slo_s 0.05 or "300ms", a bucket's input -5)
  re-scored to the same figure, exit 0, and said nothing: the section is output only, and a ``note:``
  line now names what differs from the re-score (and the file's max-load, as the other workloads' do);
* a bad value in the ``problem`` section, which the re-score reads, was an error naming a flag the user
  never typed (``--ttft-slo must be ...``), a bucket without its file, or a traceback: now one ``error:``
  line naming the file and the field; the fields not read back (schedule, kinds, model, params) are
  records, and a note says when they differ;
* ``evaluate --requests OTHER`` kept the file's decode context (the old mix's) instead of the new mix's;
* a mix of one-token outputs printed "TPOT 3105 ms" beside "100.0% meet ... TPOT <= 50 ms": no request
  has a decode step, so TPOT is n/a;
* the sweep's "plans scored" column said "auto solver's per N" where the footer said every plan of some
  micro-batch counts was scored: both now name the counts.
"""

from __future__ import annotations

import json

import pytest

from placement.cli import main

_LLAMA = {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
          "num_key_value_heads": 32, "vocab_size": 32000, "torch_dtype": "float16"}
_CHAT = {"buckets": [{"input": 256, "output": 128, "weight": 5}, {"input": 1024, "output": 256, "weight": 3},
                     {"input": 4096, "output": 256, "weight": 1}]}


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    """The config, and a goodput result and a decode plan placed on it (one A100, batch 8: quick)."""
    d = tmp_path_factory.mktemp("goodput_edits")
    cfg, mix = d / "llama.json", d / "chat.json"
    cfg.write_text(json.dumps(_LLAMA))
    mix.write_text(json.dumps(_CHAT))
    good, plan = d / "goodput.json", d / "plan.json"
    assert main(["place", str(cfg), "--devices", "a100:1", "--objective", "goodput", "--requests", str(mix),
                 "--ttft-slo", "300", "--tpot-slo", "40", "--batch-size", "8", "--out", str(good)]) == 0
    assert main(["place", str(cfg), "--devices", "a100:1", "--batch-size", "8", "--context", "512",
                 "--out", str(plan)]) == 0
    return d, cfg, json.loads(good.read_text()), json.loads(plan.read_text())


def _evaluate(placed, doc: dict, capsys, *flags, out: bool = False):
    """``placement evaluate`` of ``doc`` (written as edited.json): the exit code and stderr (``out``: and
    stdout)."""
    d, cfg, _, _ = placed
    path = d / "edited.json"
    path.write_text(json.dumps(doc))
    capsys.readouterr()
    code = main(["evaluate", str(cfg), str(path), *flags])
    got = capsys.readouterr()
    return (code, got.out, got.err) if out else (code, got.err)


def _edited(doc: dict, where: str, value) -> dict:
    """A copy of ``doc`` with the field at ``where`` (``a.b[0].c``) set to ``value``."""
    import copy
    import re

    doc = copy.deepcopy(doc)
    keys = [int(k) if k.isdigit() else k for k in re.findall(r"[^.\[\]]+", where)]
    at = doc
    for k in keys[:-1]:
        at = at[k]
    at[keys[-1]] = value
    return doc


def test_an_unedited_result_reevaluates_without_a_note(placed, capsys):
    _, _, good, plan = placed
    for doc in (good, plan):
        code, err = _evaluate(placed, doc, capsys)
        assert code == 0 and err == "", err


@pytest.mark.parametrize("where, value, shown", [
    ("goodput.goodput_rps", 100.0, "100"),
    ("goodput.ttft_slo_s", 0.05, "0.05"),
    ("goodput.ttft_slo_s", "300ms", '"300ms"'),
    ("goodput.buckets[0].input", -5, "-5"),
])
def test_an_edited_goodput_section_is_said_to_differ(placed, capsys, where, value, shown):
    """The file's own figure (place's search wrote it) is what the re-score gives back; the edit is named
    with both values."""
    _, _, good, _ = placed
    was = good
    for k in where.replace("[0]", ".0").split("."):
        was = was[int(k)] if k.isdigit() else was[k]
    code, err = _evaluate(placed, _edited(good, where, value), capsys)
    assert code == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("note: ") and "edited.json" in lines[0], err
    now = f"{was:.6g}" if isinstance(was, float) else json.dumps(was)
    assert f"{where} {shown} (re-scored {now})" in lines[0], err
    assert "the goodput section is output only" in lines[0]


def test_an_edited_max_load_is_said_to_differ(placed, capsys):
    _, _, good, _ = placed
    code, err = _evaluate(placed, _edited(good, "max_load", good["max_load"] * 2), capsys)
    assert code == 0
    ms = good["max_load"] * 1e3
    assert f"the max-load {ms:.6g} ms per token is not the file's {2 * ms:.6g} ms per token" in err, err


def test_a_target_given_again_is_the_reason_of_the_note(placed, capsys):
    _, _, good, _ = placed
    code, err = _evaluate(placed, good, capsys, "--ttft-slo", "50")
    assert code == 0
    assert "goodput.ttft_slo_s 0.3 (re-scored 0.05)" in err and "evaluated at --ttft-slo 50, the file " \
        "records 300" in err, err


# a goodput result's problem fields that are read back, each with a bad value
_GOODPUT_BAD = [
    ("ttft_slo_ms", "300", 'must be a positive number of milliseconds, got "300"'),
    ("tpot_slo_ms", -1, "must be a positive number of milliseconds, got -1"),
    ("tpot_slo_ms", True, "must be a positive number of milliseconds, got true"),
    ("requests.buckets[0].input", -5, "bucket 0: 'input' must be a positive integer (tokens), got -5"),
    ("requests.buckets[0].weight", "5", "bucket 0: 'weight' must be a positive number"),
    ("requests", "chat.json", 'must be the mix itself'),
    ("requests", {"buckets": []}, "'buckets' must be a non-empty list"),
    ("batch_size", "8", 'must be a positive integer, got "8"'),
    ("batch_size", 0, "must be a positive integer, got 0"),
    ("devices", 5, "must be a device spec"),
    ("devices", "a100:x", "count 'x' of 'a100'"),
    ("microbatches", "2", 'must be a positive integer or null, got "2"'),
    ("microbatches", 0, "must be a positive integer or null, got 0"),
    ("microbatches", 3, "3 micro-batches do not divide a batch of 8 sequences"),
    ("max_replicas", 0, "must be a positive integer or null, got 0"),
    ("max_replicas", "x", 'must be a positive integer or null, got "x"'),
    ("objective", "gp", 'must be "goodput" or "goodput-disaggregated"'),
    ("objective", 5, 'must be "goodput" or "goodput-disaggregated"'),
]


@pytest.mark.parametrize("field, value, words", _GOODPUT_BAD)
def test_a_bad_goodput_problem_field_names_the_file_and_field(placed, capsys, field, value, words):
    _, _, good, _ = placed
    code, err = _evaluate(placed, _edited(good, f"problem.{field}", value), capsys)
    assert code == 2, err
    name = field.split(".")[0]
    assert err.startswith(f"error: {placed[0] / 'edited.json'}: problem.{name}: ") and words in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("field, value, words", [
    ("context", "x", 'must be a positive integer, got "x"'),
    ("context", -1, "must be a positive integer, got -1"),
    ("memory_context", 0, "must be a positive integer (tokens) or null, got 0"),
    ("batch_size", None, "missing: the result does not record it; give --batch-size"),
    ("devices", None, "missing: the result does not record the devices"),
])
def test_a_bad_decode_problem_field_names_the_file_and_field(placed, capsys, field, value, words):
    _, _, _, plan = placed
    doc = _edited(plan, f"problem.{field}", value)
    if value is None:
        del doc["problem"][field]
    code, err = _evaluate(placed, doc, capsys)
    assert code == 2, err
    assert err.startswith(f"error: {placed[0] / 'edited.json'}: problem.{field}: ") and words in err, err


def test_a_problem_that_is_not_an_object_is_an_error(placed, capsys):
    _, _, good, _ = placed
    code, err = _evaluate(placed, _edited(good, "problem", 5), capsys)
    assert code == 2
    assert err.startswith(f"error: {placed[0] / 'edited.json'}: problem: must be an object"), err


@pytest.mark.parametrize("field, value", [("schedule", "1f1b"), ("model", 5), ("params", "x"),
                                          ("kinds", "x"), ("context", 2000), ("memory_context", "x")])
def test_a_problem_record_is_not_read_but_said_to_differ(placed, capsys, field, value):
    """Records of a goodput result (the contexts follow from its mix there): the re-score is that of the
    unedited file, and a note names the field."""
    _, _, good, _ = placed
    code, err = _evaluate(placed, _edited(good, f"problem.{field}", value), capsys)
    assert code == 0
    assert err.startswith("note: ") and f"problem.{field} {json.dumps(value)} (re-scored " in err, err
    assert "goodput section" not in err  # the goodput re-scored as placed


def test_requests_given_again_set_the_decode_context(placed, capsys):
    """The decode context is the mix's mean over its decode steps (input + output / 2: 100 + 20 / 2) and
    the KV memory its longest request (120), not the file's mix's."""
    d, _, good, _ = placed
    other = d / "other.json"
    other.write_text(json.dumps({"buckets": [{"input": 100, "output": 20, "weight": 1}]}))
    code, text, _ = _evaluate(placed, good, capsys, "--requests", str(other), "--json", out=True)
    assert code == 0
    out = json.loads(text)
    assert (out["problem"]["context"], out["problem"]["memory_context"]) == (110, 120)
    assert good["problem"]["context"] != 110


def test_one_output_token_has_no_tpot(tmp_path, capsys):
    """Every request's one token comes from its prefill: no decode step, no TPOT; the TPOT target is met
    by every request (as the share meeting says), in the summary, the sweep and the simulation."""
    cfg, mix, out = tmp_path / "llama.json", tmp_path / "one.json", tmp_path / "g.json"
    cfg.write_text(json.dumps(_LLAMA))
    mix.write_text(json.dumps({"buckets": [{"input": 256, "output": 1, "weight": 1}]}))
    assert main(["place", str(cfg), "--devices", "a100:1", "--objective", "goodput", "--requests", str(mix),
                 "--ttft-slo", "300", "--tpot-slo", "50", "--batch-size", "8", "--simulate", "auto",
                 "--trace-seconds", "5", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    summary = next(x for x in text.splitlines() if x.startswith("goodput "))
    assert "TPOT n/a" in summary and "100.0% meet TTFT <= 300 ms at" in summary, summary
    assert "TPOT target of 50 ms is met by every request" in summary
    import re

    assert not re.search(r"TPOT [0-9.]+ ms", summary), summary
    row = next(x for x in text.splitlines() if x.startswith("8 "))
    assert " n/a " in row, row
    assert "  TPOT  n/a" in text
    doc = json.loads(out.read_text())
    assert doc["goodput"]["tpot_s"] is None and doc["goodput"]["attainment"] == 1.0


def test_the_plans_scored_column_and_the_footer_name_the_counts(tmp_path, capsys):
    """Which micro-batch counts of batch 32 have few enough plans to score them all is counted here from
    the problems themselves (graphs.llm.chain_plans), and the column, the footer and the file say so."""
    from graphs.devices import parse_devices
    from graphs.llm import ServingModel, chain_plans, microbatch_counts, read_config, read_mix
    from placement.goodput import EXHAUSTIVE_PLANS

    cfg, mix, out = tmp_path / "llama.json", tmp_path / "chat.json", tmp_path / "g.json"
    cfg.write_text(json.dumps(_LLAMA))
    mix.write_text(json.dumps(_CHAT))
    ds = parse_devices("a100:2,t4:4")
    model = ServingModel(read_config(str(cfg)), ds, read_mix(str(mix)), ttft=0.3, tpot=0.04)
    every, solver, plans = [], [], 0
    for n in microbatch_counts(32, ds):
        found = chain_plans(model.problem(32, microbatches=n), EXHAUSTIVE_PLANS)
        if found is None:
            solver.append(n)
        else:
            every.append(n)
            plans += len(found)
    assert every and solver  # the case of the review: some counts scored whole, some not
    assert main(["place", str(cfg), "--devices", "a100:2,t4:4", "--objective", "goodput", "--requests",
                 str(mix), "--ttft-slo", "300", "--tpot-slo", "40", "--batch-size", "32",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    row = next(x for x in text.splitlines() if x.startswith("32 "))
    assert (f"all {plans:,} at N={','.join(map(str, every))}; auto solver's at "
            f"N={','.join(map(str, solver))}") in row, row
    footer = next(x for x in text.splitlines() if x.startswith("proven:"))
    assert f"except at batch 32 (N = {', '.join(map(str, every))})" in footer, footer
    sweep = json.loads(out.read_text())["goodput"]["sweep"][0]
    assert [(c["microbatches"], c["plans_scored"] is not None) for c in sweep["counts"]] == \
        [(n, n in every) for n in microbatch_counts(32, ds)]
