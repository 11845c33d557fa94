"""The ``placement`` console script and ``python -m placement``: Ctrl-C held back from the first line.

The entry point imports only this module (``import placement`` loads nothing heavy), and :func:`main`
first installs a handler that only records SIGINT: importing the command line (numpy, the graphs
package) takes a while, and a ``KeyboardInterrupt`` inside an import is a traceback, or a
half-initialised module (numpy has failed with "PyCapsule_Import could not import module 'datetime'").
It then installs the deferring handler of :mod:`placement._interrupt`, which delivers a held Ctrl-C at
the first safe point, and runs the command. Only the entry points call it; the library never touches
signals.
"""

import signal
import time

#: when the command started, as near its process's start as this code runs: a command's --time-limit is
#: counted from here, so the imports and the parsing of its options are inside it
_STARTED = time.perf_counter()


def main() -> None:
    """Run the command line as a program: exit with its code (130 after a Ctrl-C)."""
    held: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    from ._interrupt import install

    install(held=held)
    from .cli import console_main

    console_main(started=_STARTED)
