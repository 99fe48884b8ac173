"""Sweeps: many (model, seed) runs as resumable tasks on Dask distributed, and one aggregate report."""

__all__: list[str] = []
