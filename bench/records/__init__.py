"""The bench result record, which every other room of bench writes or reads: what a record says about where and
how it ran and how it is written (env.py: hardware, versions, commit, command; an atomic write), where a committed
result came from (provenance.py: its record, or a sidecar naming what was never recorded), and a directory of
records read back (results.py: grouped into configurations, set against the data-free rate, put into words, CSV).
Imports nothing of bench's other rooms, and nothing heavy: `bench watch` loads it inside the programs it watches."""
