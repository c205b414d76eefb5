"""`bench report` and what `bench loaders` says at the end: results.md with its tables (tables.py), the figures beside
it (plots.py), the scaling section over rank counts (scaling.py), watched programs (watched.py), the closing answer
and OUT/summary.json (answer.py), and `make demo`'s closing lines (demo.py)."""
