"""``python -m benchmarks.suite``: the suite now lives in the library (:mod:`placement.bench.suite`,
also ``placement bench``); this entry point is kept for existing scripts."""

import sys

from placement.bench.suite import main

if __name__ == "__main__":
    sys.exit(main())
