# ``python -m placement``: the console script's entry point (Ctrl-C held back from its first line)
from ._console import main

main()
