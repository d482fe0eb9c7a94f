"""Datasets: sources, staging where workers read them, and the arrays trials train on."""
