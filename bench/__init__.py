"""Benchmarks: throughput against MirrorMaker 2 and a raw client loop, verifier speed."""
