# the Ctrl-C handler first: SIGINT during the imports below is deferred, not a traceback
from ._interrupt import install

install()

from .cli import console_main  # noqa: E402

console_main()
