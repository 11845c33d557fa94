"""``placement calibrate``: measure a device kind on this machine and write a device file for it.

    placement calibrate KIND [-o DEVICES.toml] [--threads N] [--clock C] [--budget S] [--cap S]
                             [--tolerance F] [--strict]
    placement calibrate KIND --from-profile MODEL.onnx [-o DEVICES.toml] [--threads N] [--batch-size N]

The first form runs the micro-benchmarks of :func:`graphs.calibrate.calibrate` (CPU for ``cpu``, the
CUDA execution provider for an accelerator preset, an error without it); the second fits the kind to
one model's per-operator profile (:func:`graphs.calibrate.fit_profile`); an option of one form given
to the other is refused, naming it. Either way the file defines
the kind under its preset name, so ``--device-file DEVICES.toml`` makes ``--devices KIND:n`` use it.
A calibration that competing work disturbed prints one ``calibration disturbed: ...`` line (stderr)
and writes it into the file; ``--strict`` refuses instead (exit 2, no file). A fit names the rates it
copied rather than fitted, and an overhead it left at its lower bound; a benchmarked figure whose
benchmarks did not settle says so on its row. Bad input raises :class:`~graphs.errors.InputError`
(exit 2).
"""

from __future__ import annotations

import sys

from graphs.errors import InputError

__all__ = ["add_parser", "run"]


def add_parser(sub) -> None:
    c = sub.add_parser(
        "calibrate", help="measure a device kind here and write a device file for the roofline costs",
        usage="placement calibrate KIND [-o DEVICES.toml] [--threads N] [--clock auto|wall|cpu] "
              "[--budget S] [--cap S] [--tolerance F] [--strict] "
              "[--from-profile MODEL.onnx [--batch-size N]]",
        description="Measure the achieved Conv and MatMul FLOP/s, memory bandwidth by operator size and "
                    "per-operator overhead of a device kind with onnxruntime micro-benchmarks generated "
                    "here (the CPU for 'cpu', the CUDA execution provider for an accelerator preset), or "
                    "fit them to one model's profile (--from-profile), and write a TOML device file that "
                    "overrides the preset: use it with --device-file and --costs roofline.")
    c.add_argument("kind", metavar="KIND", help="the preset to calibrate (cpu, v100, a100, a100-80gb, h100, "
                   "t4, l4)")
    c.add_argument("--out", "-o", default=None, metavar="DEVICES.toml",
                   help="where to write the device file (default calibrated-KIND.toml here)")
    c.add_argument("--threads", type=int, default=1, metavar="N",
                   help="intra-op threads: the calibrated kind stands for N cores (default 1)")
    c.add_argument("--from-profile", default=None, metavar="MODEL.onnx",
                   help="fit the kind to this model's per-operator profile instead of micro-benchmarks "
                        "(host kinds: the profile is taken on this CPU)")
    c.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help="--from-profile: batch size of the model (default 1)")
    c.add_argument("--clock", default=None, choices=("auto", "wall", "cpu"),
                   help="auto (default): the thread's CPU time where it measures the work (cpu kind, one "
                        "thread), else the wall clock; wall: what runs take on this machine as loaded now; "
                        "cpu: the thread's CPU time, which other processes do not inflate")
    c.add_argument("--budget", type=float, default=None, metavar="S",
                   help="at least S seconds of timed runs per benchmark session (default 0.25)")
    c.add_argument("--cap", type=float, default=None, metavar="S",
                   help="at most S seconds per session while its figure has not settled (default 4 x budget)")
    c.add_argument("--tolerance", type=float, default=None, metavar="F",
                   help="a figure has settled when its 95%% interval is within +-F (default 0.03)")
    c.add_argument("--strict", action="store_true", default=None,
                   help="refuse (exit 2, no file) when competing work on the machine disturbs the "
                        "benchmarks, instead of writing the figures with a warning")


#: the micro-benchmarks' options (``dest``, flag) and their defaults; a profile fit takes none of them
_BENCHMARK_OPTIONS = (("clock", "--clock", "auto"), ("budget", "--budget", 0.25), ("cap", "--cap", None),
                      ("tolerance", "--tolerance", 0.03), ("strict", "--strict", False))


def _refuse_dropped_options(args) -> None:
    """An option of one form only (``--batch-size`` of ``--from-profile``; the micro-benchmarks'
    :data:`_BENCHMARK_OPTIONS`), given to the other, is an :class:`InputError` naming it, not ignored; the
    benchmarks' defaults are filled in otherwise."""
    if args.from_profile:
        for dest, flag, _ in _BENCHMARK_OPTIONS:
            if getattr(args, dest, None) is not None:
                raise InputError(f"{flag} applies to the micro-benchmarks, not to --from-profile (a fit to "
                                 f"the model's profile runs no benchmark sessions); drop {flag} or "
                                 f"--from-profile")
        return
    if getattr(args, "batch_size", None) is not None:
        raise InputError("--batch-size applies with --from-profile (the batch size of the profiled "
                         "model); the micro-benchmarks have no model and no batch size: add --from-profile "
                         "MODEL.onnx or drop --batch-size")
    for dest, _, default in _BENCHMARK_OPTIONS:
        if getattr(args, dest, None) is None:
            setattr(args, dest, default)


def _check_profile_model(path: str) -> None:
    """``--from-profile`` takes an ONNX model (named ``.onnx``, as every command takes one): another file
    (an LLM model config, a workload) is an :class:`InputError` saying what it is, not onnx's parse error
    of its bytes."""
    from ..inputs import file_kind
    from ..load import check_input_path

    check_input_path(path, "an ONNX model (.onnx)")
    if path.lower().endswith(".onnx"):
        return
    kind, words = file_kind(path)
    what = "its name does not end in .onnx" if kind == "unknown" else f"this is {words}"
    raise InputError(f"--from-profile takes an ONNX model (.onnx), whose operators it runs and times on this "
                     f"CPU; {what}", source=path)


def run(args) -> int:
    """Run ``placement calibrate`` (see the module doc); returns the exit code."""
    from graphs.calibrate import calibrate, fit_profile, write_device_file
    from graphs.devices import preset

    spec = preset(args.kind)
    if args.threads < 1:
        raise InputError(f"--threads must be at least 1, got {args.threads}")
    _refuse_dropped_options(args)
    if args.from_profile and args.batch_size is not None and args.batch_size < 1:
        raise InputError(f"--batch-size must be a positive integer, got {args.batch_size}")
    if not args.from_profile:
        if not args.budget > 0:
            raise InputError(f"--budget must be positive, got {args.budget}")
        if args.cap is not None and not args.cap >= args.budget:
            raise InputError(f"--cap must be at least --budget ({args.budget}), got {args.cap}")
        if not 0 < args.tolerance < 1:
            raise InputError(f"--tolerance must be a fraction between 0 and 1, got {args.tolerance}")
    out = args.out or f"calibrated-{spec.name}.toml"
    if not out.lower().endswith(".toml"):
        raise InputError("the device file is written as TOML: give a path ending in .toml", source=out)
    from ..outputs import output_file

    output_file(out, "--out")  # before the benchmarks run
    if args.from_profile:
        if not spec.host:
            raise InputError(f"--from-profile profiles operators on this machine's CPU, so it fits host "
                             f"kinds only (cpu), not {spec.name!r}")
        _check_profile_model(args.from_profile)
        from graphs.onnx_loader import load_onnx

        g = load_onnx(args.from_profile, batch_size=args.batch_size)
        cal = fit_profile(g, spec.name, threads=args.threads)
    else:
        tell = (lambda m: print(f"  {m}", file=sys.stderr, flush=True)) if sys.stderr.isatty() else None
        cal = calibrate(spec.name, threads=args.threads, budget=args.budget, cap=args.cap, clock=args.clock,
                        tolerance=args.tolerance, strict=args.strict, progress=tell)
    write_device_file(cal, out)
    d = cal.disturbance
    if d is not None and d.disturbed:
        print(d.line(), file=sys.stderr, flush=True)
    print(f"{cal.kind}: {cal.method}, {cal.threads} thread(s), {cal.seconds:.1f} s")
    verb = "fitted" if cal.method.startswith("fit") else "measured"

    def how(figure: str) -> str:
        # a figure from benchmarks that hit their time cap is less certain than the others: say which
        bad, total = cal.unsettled(figure)
        if not bad:
            return verb
        return f"{verb}, not settled" + (f": {bad} of its {total} benchmarks" if total > 1 else "")

    def rate(figure: str, text: str) -> str:
        src = cal.source(figure)
        if src in ("measured", "fitted"):
            return f"{text} ({how(figure)})"
        return f"{text} (NOT {verb.upper()}: {src})"

    cs = cal.spec()
    curve = cal.conv_half_channels or cal.conv_half_pixels
    rows = [("Conv, fp32", rate("conv", f"{cal.conv_flops / 1e9:.1f} GFLOP/s")
             + (f"; half that at {cal.conv_half_channels:.3g} output channels or "
                f"{cal.conv_half_pixels:.3g} pixels" if curve else "")),
            ("MatMul/Gemm, fp32", rate("matmul", f"{cal.matmul_flops / 1e9:.1f} GFLOP/s")),
            ("other arithmetic, fp32", rate("other", f"{cs.fp32 / 1e9:.1f} GFLOP/s")),
            ("fp16", f"{cal.fp16_flops / 1e9:.1f} GFLOP/s ({how('fp16')})" if cal.fp16_flops else
             "not measured (same as the other-arithmetic rate)"),
            ("memory bandwidth (large)", rate("bandwidth", f"{cal.bandwidth / 1e9:.1f} GB/s")),
            ("per-operator overhead", f"{cal.launch * 1e6:.2f} us " + (
                "(at the fit's lower bound: not determined by this profile; kept at 0, as the rates were "
                "fitted)" if cal.at_bound("launch") else f"({how('launch')})"))]
    if cal.depthwise is not None:
        (r1, c1), (r2, c2) = cal.depthwise
        rows.append(("depthwise Conv", f"{r1 / 1e9:.3g} GFLOP/s + {c1 * 1e6:.3g} us per channel, strided "
                     f"{r2 / 1e9:.3g} GFLOP/s + {c2 * 1e6:.3g} us per channel ({how('depthwise')})"))
    if cal.view_time is not None:
        rows.append(("metadata-only operators", f"{cal.view_time * 1e6:.2f} us each (Reshape, Flatten, "
                     f"Squeeze, Unsqueeze; {how('view')})"))
    if cal.transpose is not None:
        rate, per_run = cal.transpose
        rows.append(("Transpose", f"{rate / 1e9:.3g} GB/s (at most the bandwidth at its size) + "
                     f"{per_run * 1e9:.3g} ns per contiguous run ({how('transpose')})"))
    if cal.op_flops:
        rows.append(("own-rate operators", ", ".join(f"{t} {r / 1e9:.3g}" for t, r in cal.op_flops)
                     + f" GFLOP/s ({how('ops')})"))
    if cal.bandwidth_curve:
        curve = ", ".join(f"{_size(b)} {r / 1e9:.0f}" for b, r in cal.bandwidth_curve)
        bad, _total = cal.unsettled("bandwidth_curve")
        rows.append(("bandwidth by size", curve + " GB/s" + (f" ({how('bandwidth_curve')})" if bad else "")))
    if "profiled_ms" in cal.points:
        p = cal.points
        rows.append(("fit", f"{p['operators']} operators, profiled {p['profiled_ms']:.2f} ms, "
                            f"fitted {p['fitted_ms']:.2f} ms"))
    if "fp16_error" in cal.points:
        rows.append(("fp16 MatMul", "not run by this provider"))
    if d is not None:
        rows.append(("machine", d.line()))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
    copied = cal.copied()
    if copied:
        print(f"copied, not {verb}: {', '.join(copied)} (each row above says from where and why)")
    print(f"wrote {out}: use --devices {cal.kind}:N --device-file {out} --costs roofline "
          f"(was: {spec.peak() / 1e9:.0f} GFLOP/s, {spec.bandwidth / 1e9:.0f} GB/s)")
    return 0


def _size(nbytes: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"
