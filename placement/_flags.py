"""A library message in the command line's words, in one place.

The library's messages name what a library caller passed: an argument (``devices='a100:4,cpu:8'``,
``solver='auto'``, ``strict=True``, ``plot_simulation(path='sim.png')``) or a solver option
(``options.time_limit``, ``options.raw['split']``). A user of the command line typed flags instead;
:func:`cli_words` rewrites the one into the other where the command line turns an error into its
``error:`` line.
"""

from __future__ import annotations

import re

__all__ = ["cli_words", "ARGUMENT_FLAGS", "SWITCH_FLAGS", "CALL_FLAGS"]

#: keyword arguments the library's messages name, and the flag that sets them (``rate``: the rate of
#: graphs.llm_sim.simulate_plan, which ``--simulate`` gives)
ARGUMENT_FLAGS = {"devices": "--devices", "solver": "--solver", "rate": "--simulate"}
#: boolean keyword arguments the library's messages name as ``NAME=True``, and the flag that sets them
SWITCH_FLAGS = {"strict": "--strict"}
#: ``(function, argument)`` the library's messages name as ``function(argument='value')``, because the
#: argument's name alone (``path``) is too common a word to stand for one flag everywhere
CALL_FLAGS = {("plot_simulation", "path"): "--plot"}

_ARGUMENT = re.compile(r"\b(" + "|".join(ARGUMENT_FLAGS) + r")=(['\"])([^'\"]*)\2")
_SWITCH = re.compile(r"\b(" + "|".join(SWITCH_FLAGS) + r")=True\b")
_CALL = re.compile(r"\b(\w+)\((\w+)=(['\"])([^'\"]*)\3\)")
_RAW = re.compile(r"options\.raw\[(['\"])(\w+)\1\]")
_OPTION = re.compile(r"\boptions\.(time_limit|gap|threads|seed|backend|subgraphs_per_device)\b")


def cli_words(message: str) -> str:
    """``message`` with the library's names replaced by the flags: ``devices='a100:4'`` becomes
    ``--devices a100:4``, ``solver='ip'`` ``--solver ip``, ``strict=True`` ``--strict``,
    ``plot_simulation(path='a.png')`` ``--plot a.png``, ``options.raw['split']`` ``--split``
    (:data:`solvers.registry.RAW_OPTIONS`), ``options.time_limit`` ``--time-limit``."""
    from solvers.registry import RAW_OPTIONS

    def call(m: re.Match) -> str:
        flag = CALL_FLAGS.get((m.group(1), m.group(2)))
        return m.group(0) if flag is None else f"{flag} {m.group(4)}"

    message = _CALL.sub(call, message)
    message = _ARGUMENT.sub(lambda m: f"{ARGUMENT_FLAGS[m.group(1)]} {m.group(3)}", message)
    message = _SWITCH.sub(lambda m: SWITCH_FLAGS[m.group(1)], message)
    message = _RAW.sub(lambda m: RAW_OPTIONS.get(m.group(2), m.group(0)), message)
    return _OPTION.sub(lambda m: "--" + m.group(1).replace("_", "-"), message)
