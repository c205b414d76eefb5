"""`python -m training ...` is the `train` command; torchrun launches it with `-m training`."""

from .cli import main

main()
