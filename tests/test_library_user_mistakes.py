"""A user's mistake in a library call is refused up front with a typed error naming the argument, and
no option is silently ignored (the library-review items)."""

import json
import re

import onnx_ir as ir
import pytest

import placement
from graphs import Cluster, DeviceKind, Node, OpGraph
from graphs.devices import parse_devices
from graphs.errors import InputError
from graphs.transformer import transformer_model
from placement.passes import PlacementPass, SplitPass
from solvers.base import SolveOptions


@pytest.fixture(scope="module")
def small_model():
    return transformer_model(layers=2, hidden=64)


# --------------------------------------------------------------------------- item 1: typed errors
@pytest.mark.parametrize("devices", [["a100:2"], ("t4", 2), 4])
def test_a_devices_value_that_is_not_a_str_is_a_type_error_naming_devices(small_model, devices):
    with pytest.raises(TypeError, match=r"place_model\(devices=\.\.\.\) takes a str such as 'a100:4,cpu:8'"):
        placement.place_model(small_model, devices=devices)
    with pytest.raises(TypeError, match=r"devices takes a str such as 'a100:4,cpu:8'"):
        parse_devices(devices)


def test_place_module_refuses_a_devices_list_naming_devices():
    torch = pytest.importorskip("torch")
    from placement.torch import place_module
    from tests.torch_models import mlp_sequential

    with pytest.raises(TypeError, match=r"place_module\(devices=\.\.\.\) takes a str .* got list"):
        place_module(mlp_sequential(), (torch.randn(2, 64),), devices=["a100:2"])


def test_the_passes_refuse_a_model_proto_before_placing(small_model, monkeypatch):
    import placement.passes as passes

    def no_solve(*a, **k):  # the refusal comes first, not after a full solve
        raise AssertionError("placed a ModelProto")

    monkeypatch.setattr(passes, "place_model", no_solve)
    with pytest.raises(TypeError, match=r"PlacementPass takes an onnx_ir\.Model, got onnx.*ModelProto "
                                        r"\(convert it with onnx_ir\.serde\.deserialize_model"):
        PlacementPass(devices="a100:2")(small_model)
    with pytest.raises(TypeError, match=r"SplitPass takes an onnx_ir\.Model, got .*ModelProto"):
        SplitPass()(small_model)


def test_placement_pass_refuses_an_unknown_option_at_construction():
    with pytest.raises(TypeError, match=r"PlacementPass got unknown option\(s\) bogus_option, zz; it takes "
                                        r"those of placement\.place_model: .*training"):
        PlacementPass(devices="t4:2", bogus_option=3, zz=1)
    PlacementPass(devices="t4:2", training=True, max_replicas=1)  # known ones are kept


@pytest.mark.parametrize("kw, words", [
    ({"seed": "x"}, r"SolveOptions\(seed=\.\.\.\) takes an integer, got str"),
    ({"seed": 1.5}, r"SolveOptions\(seed=\.\.\.\) takes an integer, got float"),
    ({"seed": True}, r"SolveOptions\(seed=\.\.\.\) takes an integer, got bool"),
    ({"progress": 3}, r"SolveOptions\(progress=\.\.\.\) takes a callable .* got int"),
])
def test_solve_options_check_seed_and_progress_naming_them(kw, words):
    with pytest.raises(TypeError, match=words):
        SolveOptions(**kw)


def test_solve_options_keep_good_seed_and_progress():
    import numpy as np

    assert SolveOptions(seed=np.int64(3), progress=print).seed == 3
    assert SolveOptions(progress=None).progress is None


def test_split_and_annotate_take_a_result_file_path(small_model, tmp_path):
    p = placement.place_model(small_model, devices="t4:2", max_replicas=1)
    path = tmp_path / "result.json"
    path.write_text(json.dumps(placement.inmemory.placement_result(p)))
    by_path = placement.split(small_model, str(path))
    by_placement = placement.split(small_model, p)
    assert by_path[1] == by_placement[1]
    assert [m.graph.node for m in by_path[0]] == [m.graph.node for m in by_placement[0]]
    assert placement.annotate(small_model, path) == placement.annotate(small_model, p)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hello": 1}))
    with pytest.raises(InputError, match="not a placement result file"):
        placement.split(small_model, bad)
    with pytest.raises(InputError, match="no such file"):
        placement.split(small_model, str(tmp_path / "missing.json"))


@pytest.mark.parametrize("edit, words", [
    ({"dataParallelDegree": 2}, "stages[0].dataParallelDegree is 2, not 1"),
    ({"tensorParallelDegree": 4}, "stages[0].tensorParallelDegree is 4, not 1"),
    ({"devices": ["t4:0", "t4:1"]}, "stages[0].devices lists 2 devices"),
])
def test_split_and_annotate_refuse_a_one_device_per_stage_mapping_with_replicas(small_model, tmp_path, edit,
                                                                                words):
    """An edited one-device-per-stage result given as a mapping or a file: a stage of d or t above 1 is
    refused as the command line refuses it (cb92d79), where split and annotate applied devices[] and
    ignored it."""
    p = placement.place_model(small_model, devices="t4:2", max_replicas=1)
    data = placement.inmemory.placement_result(p)
    data["stages"][0].update(edit)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    for given in (data, str(path)):
        with pytest.raises(InputError, match=re.escape(words)):
            placement.split(small_model, given)
        with pytest.raises(InputError, match=re.escape(words)):
            placement.annotate(small_model, given)


def test_split_takes_a_stage_plan_result_file(small_model, tmp_path):
    p = placement.place_model(small_model, devices="t4:2")
    path = tmp_path / "result.json"
    path.write_text(json.dumps(placement.inmemory.placement_result(p)))
    assert placement.split(small_model, path)[1] == placement.split(small_model, p)[1]
    irm = ir.serde.deserialize_model(small_model)
    assert len(SplitPass(str(path))(irm).stages) == len(placement.split(small_model, p)[0])


# --------------------------------------------------------------------------- item 2: nothing ignored
@pytest.mark.parametrize("kw, error, words", [
    ({"optimizer": "sgd"}, InputError, r"place_module\(optimizer=\.\.\.\) applies to training"),
    ({"backward_factor": 5.0}, InputError, r"place_module\(backward_factor=\.\.\.\) applies to training"),
    ({"training": "yes"}, TypeError, r"place_module\(training=\.\.\.\) takes a bool, got str"),
    ({"microbatches": 0}, InputError, r"microbatches must be a positive integer, got 0"),
    ({"microbatches": 2.5}, InputError, r"microbatches must be a positive integer, got 2\.5"),
])
def test_place_module_refuses_what_place_model_refuses(kw, error, words):
    torch = pytest.importorskip("torch")
    from placement.torch import place_module
    from tests.torch_models import mlp_sequential

    with pytest.raises(error, match=words):
        place_module(mlp_sequential(), (torch.randn(2, 64),), devices="t4:2", **kw)


def test_solve_options_doc_says_nothing_is_ignored():
    doc = SolveOptions.__doc__
    assert "ignores" not in doc and "nothing is silently ignored" in doc


# --------------------------------------------------------------------------- item 3: a status, not an error
def _tiny_memory():
    import dataclasses

    from graphs.devices import PRESETS, DeviceSet

    return DeviceSet((dataclasses.replace(PRESETS["t4"], memory=1000.0),), (2,))


@pytest.mark.parametrize("kw, status, words", [
    ({"devices": "t4:2", "max_replicas": None, "options": SolveOptions(time_limit=0)}, "stopped",
     "time limit reached"),
    ({"devices": "tiny"}, "infeasible", "needs 68608 bytes but one t4 holds 1000 bytes"),
    ({"devices": "tiny", "max_replicas": None}, "infeasible", "fit no device even alone"),
])
def test_place_module_returns_a_time_limit_or_an_infeasibility_as_a_status(kw, status, words):
    torch = pytest.importorskip("torch")
    from placement.torch import layer_partition, place_module, split_spec
    from tests.torch_models import mlp_sequential

    if kw["devices"] == "tiny":
        kw = dict(kw, devices=_tiny_memory())
    tp = place_module(mlp_sequential(), (torch.randn(2, 64),), **kw)
    assert tp.status.value == status and tp.num_stages == 0 and tp.stage_starts == ()
    assert tp.time_per_run == float("inf") and tp.time_per_sample == float("inf")
    assert words in tp.placement.solution.message and words in tp.notes[0]
    assert f"status={status!r}, stages=0" in repr(tp)
    for fn in (split_spec, layer_partition):  # an empty spec would read as one stage
        with pytest.raises(InputError, match=rf"{fn.__name__}\(tp\): there is no plan to apply \(status "
                                             rf"'{status}'"):
            fn(tp)


# --------------------------------------------------------------------------- item 4: tensor_parallel=False
@pytest.fixture(scope="module")
def wide_model():
    # wide enough that the training plan on t4:8 uses tensor parallelism (t = 2)
    return transformer_model(layers=2, hidden=1024, weights="generated")


def test_the_readme_pass_pipeline_splits_with_tensor_parallel_false(wide_model):
    irm = ir.serde.deserialize_model(wide_model)
    place, split = PlacementPass(devices="t4:8", training=True), SplitPass()
    with pytest.raises(ir.passes.PassError) as e:  # the pass manager wraps what a pass raises
        ir.passes.PassManager([place, split])(irm)
    cause = e.value
    while not isinstance(cause, InputError):
        cause = cause.__cause__
    assert "is tensor-parallel: an onnx_ir model's split keeps whole stages only; place it with " \
           "tensor_parallel=False" in str(cause)
    assert max(s.stage.t for s in place.placement.stages) > 1
    irm = ir.serde.deserialize_model(wide_model)
    place, split = PlacementPass(devices="t4:8", training=True, tensor_parallel=False), SplitPass()
    ir.passes.PassManager([place, split])(irm)
    assert {s.stage.t for s in place.placement.stages} == {1}
    assert len(split.stages) == len(place.placement.stages)
    p = placement.place_model(wide_model, "t4:8", training=True, tensor_parallel=False)
    assert [s.stage for s in p.stages] == [s.stage for s in place.placement.stages]


def test_tensor_parallel_takes_a_bool(small_model):
    with pytest.raises(TypeError, match=r"place_model\(tensor_parallel=\.\.\.\) takes a bool, got str"):
        placement.place_model(small_model, "t4:2", tensor_parallel="no")
    # the one-device-per-stage placement has t = 1 anyway: honoured, not refused
    p = placement.place_model(small_model, "t4:2", tensor_parallel=False, max_replicas=1)
    assert p.model != "stages"


# --------------------------------------------------------------------------- item 5: Ctrl-C aborts a pass
def test_a_ctrl_c_during_the_placement_pass_aborts_the_pipeline(small_model, monkeypatch):
    import dataclasses

    import placement.passes as passes

    real = placement.place_model(small_model, "t4:2")
    cut = dataclasses.replace(real, solution=dataclasses.replace(
        real.solution, message="interrupted (Ctrl-C): the best plan found so far"))
    assert cut.solution.interrupted and cut.assignment is not None  # what place_model returns
    monkeypatch.setattr(passes, "place_model", lambda *a, **k: cut)
    irm = ir.serde.deserialize_model(small_model)
    place, split = PlacementPass(devices="t4:2"), SplitPass()
    with pytest.raises(KeyboardInterrupt, match="PlacementPass interrupted: interrupted \\(Ctrl-C\\)"):
        ir.passes.PassManager([place, split])(irm)
    assert place.placement is cut  # the plan is kept, but not applied
    assert not any(k.startswith("placement.") for k in irm.metadata_props)
    assert not any(k.startswith("placement.") for n in irm.graph for k in n.metadata_props)
    assert split.stages == [] and split.manifest == {}  # the pipeline stopped


def test_an_uninterrupted_placement_pass_annotates(small_model):
    irm = ir.serde.deserialize_model(small_model)
    place = PlacementPass(devices="t4:2")
    place(irm)
    assert not place.placement.solution.interrupted and "placement.result" in irm.metadata_props


def test_infeasible_without_memory_limits_does_not_blame_memory():
    """A GPU, a host core that alone runs the middle node, and no memory limit anywhere: no pipeline
    exists (the GPU would hold the first and last nodes around the core's), which the messages said was
    "the devices' memory"."""
    from graphs import Cluster, DeviceKind, Node, OpGraph
    from placement import SolveOptions, place
    from solvers.base import Status

    g = OpGraph.from_nodes([Node("a", {"gpu": 1.0}, comm=0.1), Node("b", {"cpu": 1.0}, comm=0.1),
                            Node("c", {"gpu": 1.0})], [("a", "b"), ("b", "c")])
    c = Cluster((DeviceKind("gpu", 1), DeviceKind("cpu", 1, pays_communication=False)))
    for solver, options in (("auto", None), ("dp", None), ("ip", SolveOptions(objective="latency"))):
        p = place(g, c, solver, options)
        assert p.status is Status.INFEASIBLE
        assert "memory" not in p.solution.message.replace("none has a memory limit", "")
        assert "exists on these devices (none has a memory limit)" in p.solution.message
    # a memory limit blames memory only where a node needs memory
    limited = Cluster((DeviceKind("gpu", 1, memory=1e9), DeviceKind("cpu", 1, pays_communication=False)))
    assert "exists on these devices" in place(g, limited).solution.message
    heavy = OpGraph.from_nodes([Node("a", {"gpu": 1.0}, memory=6e8), Node("b", {"gpu": 1.0}, memory=6e8)],
                               [("a", "b")])
    p = place(heavy, Cluster((DeviceKind("gpu", 1, memory=1e9),)))
    assert p.status is Status.INFEASIBLE and "fits the devices' memory" in p.solution.message


def test_edges_as_numpy_rows_and_a_whole_float_colocation_are_accepted():
    """The builder's new checks must not refuse what it took before: edges as numpy rows, a colocation
    class read from a table as 1.0."""
    import numpy as np

    nodes = [Node("a", {"gpu": 1.0}, colocation=1.0), Node("b", {"gpu": 2.0}, colocation=np.float64(1.0))]
    for edges in (np.array([["a", "b"]]), [np.array(["a", "b"])], [["a", "b"]]):
        g = OpGraph.from_nodes(nodes, edges)
        assert g.num_edges == 1 and list(g.colocation) == [1, 1]


COMPUTE = "compute maps device-kind names to times"
TWO = [Node("a", {"g": 1.0}), Node("b", {"g": 1.0})]


@pytest.mark.parametrize("build, error, words", [
    (lambda: OpGraph.from_nodes([Node("a", 1.0)], []), TypeError, COMPUTE),
    (lambda: OpGraph.from_nodes([Node("a", [1.0])], []), TypeError, COMPUTE),
    (lambda: OpGraph.from_nodes([("a", {"g": 1.0})], []), TypeError, "nodes[0] is a tuple, not a graphs"),
    (lambda: OpGraph.from_nodes(TWO, [("a", "b", "c")]), InputError, "expected a (source name, destination "
                                                                       "name) pair"),
    (lambda: OpGraph.from_nodes([Node("a", {"g": 1.0}, colocation="x")], []), InputError,
     "colocation must be an integer class or None"),
    (lambda: OpGraph.from_nodes([Node("a", {"g": 1.0}, colocation=1.5)], []), InputError,
     "colocation must be an integer class or None"),
    (lambda: Cluster(("gpu",)), TypeError, "kinds[0] is a str, not a graphs.DeviceKind"),
    (lambda: DeviceKind("gpu", 2, bandwidth="8"), InputError, "bandwidth must be positive"),
    (lambda: DeviceKind("gpu", 2, server_size=1.5), InputError, "server_size must be a positive integer"),
])
def test_a_graph_or_cluster_built_wrong_says_what_is_wrong(build, error, words):
    """Each of these raised a bare TypeError, AttributeError or ValueError from deep inside (a float not
    iterable, a tuple without .name, too many values to unpack, '>' between str and int)."""
    with pytest.raises(error) as e:
        build()
    assert words in str(e.value)


def test_a_placement_asked_of_a_result_without_one_is_a_placement_error():
    from graphs.errors import NoPlacementError, PlacementError
    from placement import place

    g = OpGraph.from_nodes([Node("a", {"gpu": 1.0}, memory=10.0)], [])
    p = place(g, Cluster((DeviceKind("gpu", 1, memory=1.0),)))
    with pytest.raises(NoPlacementError, match=r"there is no placement \(status infeasible\)") as e:
        p.device_of("a")
    assert isinstance(e.value, PlacementError) and isinstance(e.value, ValueError)
