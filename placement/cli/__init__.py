"""The ``placement`` command: a thin layer over the library, one module per command.

``main(argv) -> int`` does the work (tests call it directly); ``console_main`` is the entry point.
Exit codes: 0 success, 1 no placement (infeasible, or a limit hit before any was found), 2 bad usage
or bad input, 130 interrupted. User mistakes print one ``error:`` line, never a traceback.

Every command module has ``add_parser(sub)``, which declares its options, and a function that runs it
(:data:`COMMANDS`); what they share is in :mod:`placement.cli.common`. Command modules import the
library inside their functions, so that building the parser (``--help``) stays light.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import NoReturn

from .. import _compile_notice, _interrupt
from . import calibrate, evaluate, example, inspection, place, serving, show, split_run
from .common import EXIT_INTERRUPTED, EXIT_NO_PLACEMENT, EXIT_OK, EXIT_USAGE, Parser, UsageError, cli_words

__all__ = ["main", "console_main", "build_parser", "COMMANDS"]


def _add_bench_parser(sub) -> None:
    sub.add_parser("bench", help="run the benchmark suite", add_help=False,
                   description="Run solvers x workloads and write tables; see `placement bench --help`.")


def _add_cluster_parser(sub) -> None:
    from ..cluster.command import add_parser

    add_parser(sub)


def _run_cluster(args) -> int:
    from ..cluster.command import run

    return run(args)


def _run_serving(args) -> int:
    from ..inputs import workload_kind
    from .common import llm_commands

    if args.command == "provision" and args.model and not args.example_prices \
            and workload_kind(args.model) == "llm":
        return llm_commands().provision_command(args)  # an LLM config: the cheapest instances per bucket
    return serving.run(args)


#: the subcommands in ``--help``'s order: what adds each one's parser
_PARSERS = (place.add_parser, evaluate.add_parser, inspection.add_parser, example.add_parser,
            _add_bench_parser, show.add_parser, split_run.add_parser, _add_cluster_parser,
            serving.add_parser, calibrate.add_parser)

#: each subcommand's runner (``bench`` parses its own options: :func:`main` hands it the rest of argv)
COMMANDS = {"place": place.run, "evaluate": evaluate.run, "example": example.run, "inspect": inspection.run,
            "show": show.run, "split": split_run.run_split, "run": split_run.run_run, "cluster": _run_cluster,
            "frontier": _run_serving, "provision": _run_serving, "calibrate": calibrate.run}


def build_parser() -> argparse.ArgumentParser:
    """The whole command line's parser (every subcommand's options; importing nothing heavy)."""
    from .. import __version__

    parser = Parser(prog="placement", description="Place a DNN operator graph on a set of devices.")
    parser.add_argument("--version", action="version", version=f"placement {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for add in _PARSERS:
        add(sub)
    return parser


def _run_bench(argv: list[str]) -> int:
    from ..bench.suite import main as bench_main

    return bench_main(argv)


@contextlib.contextmanager
def _user_errors(codes: list):
    """Turn the library's typed errors into one line on stderr and an exit code."""
    try:
        try:
            yield
        except BaseException:
            # the command is over: a Ctrl-C from here on (a second one, one during an error's line) must
            # not escape this handling as a traceback; one that comes now is noted, and the exit is 130
            _interrupt.quiet()
            raise
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        codes.append(EXIT_INTERRUPTED)
    except BrokenPipeError:
        codes.append(EXIT_OK)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        codes.append(EXIT_USAGE)
    except Exception as e:
        from graphs.errors import InfeasibleError, PlacementError

        if isinstance(e, InfeasibleError):
            print(f"error: infeasible: {cli_words(str(e))}", file=sys.stderr)
            codes.append(EXIT_NO_PLACEMENT)
        elif isinstance(e, PlacementError):
            print(f"error: {cli_words(str(e))}", file=sys.stderr)
            codes.append(EXIT_USAGE)
        else:
            raise


def main(argv: list[str] | None = None, *, started: float | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code. ``started``:
    when the command started (``time.perf_counter()``; default: now), from which its ``--time-limit``
    counts (``args.started``)."""
    started = time.perf_counter() if started is None else started
    from solvers._cpu import passive_waits

    passive_waits()  # the parallel DP beside other work (a process setting, so the command line's only)
    codes: list[int] = []
    with _user_errors(codes):
        argv = sys.argv[1:] if argv is None else list(argv)
        from .serving import _warnings_as_lines

        _warnings_as_lines()  # every command: the library logs its warnings and never prints them
        if argv[:1] == ["bench"]:  # the suite parses its own options (placement.bench)
            return _run_bench(argv[1:])
        parser = build_parser()
        try:
            args, extra = parser.parse_known_args(argv)
        except SystemExit as e:  # --help, --version
            return int(e.code or 0)
        if extra:  # named by the command that does not take them (argparse names the top-level program)
            where = f"placement {args.command}" if getattr(args, "command", None) else "placement"
            raise UsageError(f"{where}: unrecognized arguments: {' '.join(extra)}")
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        args.started = started
        _compile_notice.install()  # a cold numba cache compiles for a minute: say so (stderr)
        code = EXIT_INTERRUPTED  # until the command returns: a KeyboardInterrupt leaves it so
        try:
            code = COMMANDS[args.command](args)
            return code
        except Exception:
            code = None  # an error: the note may follow its line
            raise
        finally:
            _compile_notice.done(say=code != EXIT_INTERRUPTED)
            # the command's work is done: a Ctrl-C from now on is noted, not raised (one raised on the way
            # out, past _user_errors, was a traceback)
            _interrupt.quiet()
    return codes[0] if codes else EXIT_OK


def console_main(*, started: float | None = None) -> None:
    """Run the command line and exit with its code, Ctrl-C delivered by :mod:`placement._interrupt` (the
    console script, :func:`placement._console.main`, installs it from its first line and calls this).
    ``started``: as :func:`main`'s (the console script's first line)."""
    _interrupt.install()
    code = main(started=started)
    _interrupt.quiet()  # nothing left to stop: a late Ctrl-C must not turn exit into a traceback
    _interrupt.exit_past_abandoned_solver(code)  # HiGHS still running after a cancel: no C++ teardown
    _leave(code)


def _leave(code: int) -> NoReturn:
    """Exit with ``code`` past Python's teardown of the libraries a command loaded: finalizing numba,
    scipy, networkx and HiGHS takes 0.3-0.8 s on 2 busy cores after a command's work is done, outside
    any ``--time-limit``, and freeing onnxruntime and the models 0.1-0.5 s of ``run``'s exit after a
    Ctrl-C (its workers stopped and its results written whole by then). The exit handlers
    (:mod:`atexit`: multiprocessing's, which joins its children and unlinks the queues' semaphores;
    logging's; weakref finalizers and temporary folders) run first and the output is flushed; every
    file the commands write is closed by then. Where a thread other than a daemon still runs (none of
    ours does), the normal exit, which waits for it."""
    import atexit
    import threading

    if any(t.is_alive() and not t.daemon and t is not threading.main_thread() for t in threading.enumerate()):
        sys.exit(code)
    try:
        atexit._run_exitfuncs()  # what sys.exit runs (a handler's error is printed, not raised)
    finally:
        _interrupt.exit_now(code)


# the console's own frames around the command: a Ctrl-C there is held back, not raised past its handling
_interrupt.hold_in(main, console_main, _user_errors)
