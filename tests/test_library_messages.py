"""Library messages name what a library caller passed (an argument, a solver option), never a
command-line flag they did not type; :func:`placement._flags.cli_words` gives the command line's words
for the same message, in one place."""

from __future__ import annotations

import re

import pytest

from graphs.devices import parse_devices
from graphs.errors import InputError
from graphs.model import Cluster, DeviceKind, Node, OpGraph
from graphs.onnx_workload import reference_document
from placement._flags import cli_words
from solvers import dp, expert
from solvers.base import SolveOptions, Status
from tests.instances import chain

FLAG = re.compile(r"(?<![\w-])--[a-z]")


def _no_flag(message: str) -> str:
    assert not FLAG.search(message), message
    return message


def test_dp_objective_names_the_solver_argument():
    inst = chain(3)
    with pytest.raises(InputError) as e:
        dp.solve(inst.graph, inst.cluster, SolveOptions(objective="latency"))
    msg = _no_flag(str(e.value))
    assert "solver='ip'" in msg
    assert "--solver ip" in cli_words(msg)


def test_dp_too_large_names_the_solver_argument():
    inst = chain(6)
    sol = dp.solve(inst.graph, inst.cluster, SolveOptions(raw={"max_ideals": 2}))
    assert sol.status != Status.OPTIMAL
    msg = _no_flag(sol.message)
    assert "solver='auto' coarsens instead" in msg
    assert "--solver auto coarsens instead" in cli_words(msg)


def test_expert_without_a_split_names_the_option():
    inst = chain(3)
    with pytest.raises(InputError) as e:
        expert.solve(inst.graph, inst.cluster, SolveOptions())
    msg = _no_flag(str(e.value))
    assert "options.raw['split']" in msg
    assert "--split" in cli_words(msg)


def test_no_devices_names_the_argument():
    with pytest.raises(InputError) as e:
        parse_devices(None)
    msg = _no_flag(str(e.value))
    assert "devices='a100:4,cpu:8'" in msg
    assert "--devices a100:4,cpu:8" in cli_words(msg)


def test_reference_document_names_the_cluster_kinds():
    graph = OpGraph.from_nodes([Node("a", {"a100": 1.0, "t4": 2.0})], edges=[])
    cluster = Cluster((DeviceKind("a100", count=1), DeviceKind("t4", count=1)))
    with pytest.raises(InputError) as e:
        reference_document(graph, cluster)
    assert "a100, t4" in _no_flag(str(e.value))


def test_simulation_length_names_the_argument():
    from graphs.llm_sim import simulate_plan
    from tests.test_llm_sim import _one_a100

    model, problem, plan = _one_a100(4, {"buckets": [{"input": 64, "output": 8, "weight": 1}]})
    with pytest.raises(InputError) as e:
        simulate_plan(model, problem, plan, 4, rate=1.0, seconds=0)
    assert "seconds=" in _no_flag(str(e.value))


@pytest.mark.parametrize("text, words", [("fast", "give a rate in requests/s"),
                                         ("-2", "the rate must be a positive number")])
def test_a_bad_simulation_rate_names_the_rate_argument(text, words):
    from graphs.llm_sim import parse_rate

    with pytest.raises(InputError) as e:
        parse_rate(text)
    msg = _no_flag(str(e.value))
    assert f"rate='{text}': {words}" in msg
    assert cli_words(msg).startswith(f"--simulate {text}: {words}")


def test_plotting_without_matplotlib_names_the_function_and_its_path(monkeypatch, tmp_path):
    from graphs.llm_sim import plot_simulation, simulate_plan
    from tests.test_llm_sim import _one_a100

    model, problem, plan = _one_a100(4, {"buckets": [{"input": 64, "output": 8, "weight": 1}]})
    res = simulate_plan(model, problem, plan, 4, rate=1.0, seconds=5, keep_tokens=True)
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # as if not installed
    png = str(tmp_path / "sim.png")
    with pytest.raises(InputError) as e:
        plot_simulation(res, png)
    msg = _no_flag(str(e.value))
    assert f"plot_simulation(path={png!r}) needs matplotlib" in msg
    assert cli_words(msg).startswith(f"--plot {png} needs matplotlib")


def test_strict_calibration_names_the_strict_argument(monkeypatch):
    import graphs.calibrate as gc

    monkeypatch.setattr(gc, "probe_machine", lambda seconds=0.5: (1.6, 3.2))  # a busy machine
    monkeypatch.setattr(gc, "_Timer", None)  # refused before any benchmark runs
    with pytest.raises(gc.CalibrationDisturbed) as e:
        gc.calibrate("cpu", strict=True)
    msg = _no_flag(str(e.value))
    assert "(strict=True)" in msg and "without strict=True to write" in msg
    cli = cli_words(msg)
    assert "(--strict)" in cli and "without --strict to write" in cli and "strict=True" not in cli


def test_cli_words_translates_a_call_argument_only_for_its_function():
    assert cli_words("plot_simulation(path='a.png') needs x") == "--plot a.png needs x"
    assert cli_words("other(path='a.png')") == "other(path='a.png')"  # path alone is no flag
    assert cli_words("strict=Trueish, strict=False") == "strict=Trueish, strict=False"


def test_cli_words_keeps_the_existing_translations():
    assert cli_words("set options.time_limit or options.raw['memory_limit']") == \
        "set --time-limit or --memory-limit"


def test_the_command_lines_summary_shows_a_solver_message_in_flags(tmp_path, capsys, monkeypatch):
    """A solver's message (not an error) reaches the summary the command line prints: in its flags."""
    from placement.cli import main

    path = tmp_path / "example.json"
    assert main(["example", str(path)]) == 0
    monkeypatch.setattr(dp, "DEFAULT_MAX_IDEALS", 2)  # the lattice does not fit: the DP says why
    capsys.readouterr()
    main(["place", str(path), "--solver", "dp"])
    out = capsys.readouterr().out
    assert "--solver auto coarsens instead" in out and "solver='auto'" not in out, out
