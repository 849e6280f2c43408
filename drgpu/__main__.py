"""`python -m drgpu`."""

from drgpu.cli import main

main()
