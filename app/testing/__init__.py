"""Harnesses shared by the test suite and the benchmarks (bench/): a `serve` subprocess, a manual
clock, multi-process cluster helpers, request builders, a history seeder. Shipped with the package
so both can import it; the service itself never does (an import-linter contract holds that)."""
