"""Benchmarks: throughput, latency and failover against MirrorMaker 2, stalls and soak, the controller, the verifier."""
