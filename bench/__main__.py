"""`python -m bench`: the bench command line."""

from .cli import main

main()
