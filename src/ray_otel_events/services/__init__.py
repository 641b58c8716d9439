"""Runnable servers assembled from receivers, processors and exporters, with their CLI modules."""
