"""The machine under test: the submitting host's fingerprint and the compute nodes' description
in MLPerf's fields.
"""
