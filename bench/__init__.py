"""StarForge benchmarks against peers (`python -m bench`); see docs/benchmarks.md."""
