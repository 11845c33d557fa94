# Ctrl-C held back from the first line: importing the deferring handler takes a while (threading,
# importlib.util), and a KeyboardInterrupt in that import would be a traceback
import signal as _signal

_held: list[int] = []
_signal.signal(_signal.SIGINT, lambda signum, frame: _held.append(signum))

from ._interrupt import install  # noqa: E402

install(held=_held)

from .cli import console_main  # noqa: E402

console_main()
