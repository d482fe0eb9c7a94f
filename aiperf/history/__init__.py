"""Runs read side by side: the history of one workload, comparing two runs, and the nightly
regression verdict against a baseline of earlier runs.
"""
