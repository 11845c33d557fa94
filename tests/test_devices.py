"""The device catalog: presets, the compact --devices form and user device files."""

import json
import math

import pytest

from graphs.devices import PRESETS, DeviceSpec, parse_devices, preset, read_device_file
from graphs.errors import InputError

GIB = 2.0 ** 30


@pytest.mark.parametrize("name, fp32, fp16, bw, mem, link", [
    ("v100", 15.7e12, 125e12, 900e9, 32 * GIB, 16e9),
    ("a100", 19.5e12, 312e12, 1555e9, 40 * GIB, 32e9),
    ("a100-80gb", 19.5e12, 312e12, 2039e9, 80 * GIB, 32e9),
    ("h100", 67e12, 989e12, 3350e9, 80 * GIB, 64e9),
    ("t4", 8.1e12, 65e12, 320e9, 16 * GIB, 16e9),
    ("l4", 30.3e12, 121e12, 300e9, 24 * GIB, 32e9),
])
def test_accelerator_presets_carry_the_published_figures(name, fp32, fp16, bw, mem, link):
    s = preset(name)
    assert (s.fp32, s.fp16, s.mem_bandwidth, s.memory, s.link_bandwidth) == pytest.approx(
        (fp32, fp16, bw, mem, link))
    assert not s.host and s.launch > 0 and s.link_latency > 0 and s.description


def test_cpu_preset_is_a_host_core_that_pays_no_communication():
    s = preset("CPU")
    assert s.host and s.memory is None and s.transfer_time(1e9) == 0.0
    assert set(PRESETS) >= {"cpu", "v100", "a100", "h100", "t4", "l4"}


def test_compact_form_gives_the_cluster_in_order():
    ds = parse_devices("A100:4, cpu:8,t4")
    assert [s.name for s in ds.specs] == ["a100", "cpu", "t4"] and ds.counts == (4, 8, 1)
    cl = ds.cluster()
    assert [(k.name, k.count, k.pays_communication) for k in cl.kinds] == [
        ("a100", 4, True), ("cpu", 8, False), ("t4", 1, True)]
    assert cl.kind("a100").memory == 40 * GIB and cl.kind("cpu").memory is None
    assert str(ds) == "a100:4,cpu:8,t4:1"


def test_transfer_time_is_latency_plus_bytes_over_bandwidth():
    a = preset("a100")
    assert a.transfer_time(32e9) == pytest.approx(10e-6 + 1.0)
    assert a.transfer_time(0) == 0.0


@pytest.mark.parametrize("spec, message", [
    ("a10:4", "unknown device kind 'a10'.*did you mean a100"),
    ("a100:x", "count 'x'"),
    ("a100:-1", "count '-1'"),
    ("a100:2,a100:1", "listed twice"),
    ("a100:2,,cpu", "empty entry"),
    ("a100:0,cpu:0", "no devices"),
])
def test_bad_compact_forms_are_explained(spec, message):
    with pytest.raises(InputError, match=message):
        parse_devices(spec)


def test_no_spec_and_no_file_asks_for_devices():
    with pytest.raises(InputError, match="no devices given"):
        parse_devices(None)


def test_toml_device_file_defines_kinds_from_a_base_or_from_scratch(tmp_path):
    f = tmp_path / "lab.toml"
    f.write_text('''
[devices.mygpu]
base = "a100"
memory_gib = 20
unsupported_ops = ["LRN"]
count = 3

[devices.fpga]
fp32_tflops = 2.5
mem_bandwidth_gbs = 77
memory_gib = 8
link_gbs = 8
link_latency_us = 2
launch_us = 1
efficiency = 0.5
''')
    specs, counts = read_device_file(f)
    g = specs["mygpu"]
    assert g.fp32 == 19.5e12 and g.memory == 20 * GIB and g.unsupported_ops == {"LRN"}
    fp = specs["fpga"]
    assert fp.fp32 == 2.5e12 and fp.fp16 == 2.5e12 and fp.peak() == 1.25e12 and fp.bandwidth == 38.5e9
    assert fp.link_latency == pytest.approx(2e-6) and counts == {"mygpu": 3}
    # the file alone names the cluster (kinds with counts), or kinds it defines are named in the spec
    assert parse_devices(str(f)).counts == (3,)
    ds = parse_devices("fpga:2,cpu:1,mygpu:1", [f])
    assert [s.name for s in ds.specs] == ["fpga", "cpu", "mygpu"] and ds.counts == (2, 1, 1)


def test_json_device_file_and_redefining_a_preset(tmp_path):
    f = tmp_path / "devs.json"
    f.write_text(json.dumps({"devices": {"cpu": {"base": "cpu", "fp32_tflops": 0.05, "count": 4},
                                         "t4": {"base": "t4", "memory_gib": "unlimited"}}}))
    ds = parse_devices(None, [f])
    assert ds.counts == (4,) and ds.specs[0].fp32 == 5e10 and ds.specs[0].host
    assert parse_devices("t4:1", [f]).specs[0].memory is None


@pytest.mark.parametrize("body, message", [
    ('[devices.x]\nfp32_tflops = 1\n', "mem_bandwidth_gbs"),
    ('[devices.x]\nbase = "a100"\nspeed = 3\n', "unknown key.*speed"),
    ('[devices.x]\nbase = "a100"\nfp32_tflops = "fast"\n', "must be a number"),
    ('[devices.x]\nbase = "a100"\nefficiency = 1.5\n', "efficiency"),
    ('[devices.x]\nbase = "nope"\n', "unknown device kind 'nope'"),
    ('[devices.x]\nfp32_tflops = 1\nmem_bandwidth_gbs = 10\n', "link_gbs"),
    ('[devices.x]\nbase = "a100"\ncount = -2\n', "count"),
    ('[devices]\n', "must map kind names"),
    ('this is = = not toml', "not a valid TOML"),
])
def test_bad_device_files_are_explained(tmp_path, body, message):
    f = tmp_path / "bad.toml"
    f.write_text(body)
    with pytest.raises(InputError, match=message) as e:
        read_device_file(f)
    assert "bad.toml" in str(e.value)


def test_missing_device_file():
    with pytest.raises(InputError, match="no such device file"):
        parse_devices("a100:1", ["/nonexistent/devices.toml"])


def test_spec_validation():
    with pytest.raises(InputError, match="fp32"):
        DeviceSpec("bad", 0.0, 1.0, 1.0, None, 1.0, 0.0, 0.0)
    with pytest.raises(InputError, match="launch"):
        DeviceSpec("bad", 1.0, 1.0, 1.0, None, 1.0, 0.0, math.nan)
