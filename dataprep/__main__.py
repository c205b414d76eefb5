"""`python -m dataprep`: the dataprep command line."""

from .cli import main

main()
