"""Synthetic generators, partitioners, loaders of real data, and the datasets of the
classification problems (`datasets.DATASETS`)."""
