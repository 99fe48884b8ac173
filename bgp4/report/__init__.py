"""Reports: `bgp4 analyze` (runs and samples in, figures, metrics.json and report.md out) and a sweep's aggregate."""

__all__: list[str] = []
