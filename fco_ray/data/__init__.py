"""Synthetic generators, partitioners and loaders of real data."""
