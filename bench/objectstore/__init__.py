"""An object store for the tests and the benchmarks of the `stream` loader: a real SeaweedFS server on 127.0.0.1
(seaweed.py) and a proxy that shapes the link to it, bandwidth and latency (throttle.py)."""
