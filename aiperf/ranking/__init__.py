"""Ranking machines: one results list from verified result packages.

A site receives result packages (`aiperf package`) from many machines. `aiperf results import`
checks each as `aiperf verify --package` does and adds its run to the database's results table
(aiperf.ranking.importing); `aiperf results list` ranks them (aiperf.ranking.standings), one row per
system and workload, summarising a series of repeated runs by its ruleset's rule; `aiperf results
page` draws the list as one self-contained HTML page (aiperf.ranking.page).

Results of different divisions, rulesets or workloads (profile and workload hash) are never ranked
together: each is a group of its own, ranked from 1.

Below the CLI and above aiperf.report (whose package checks it reuses); no Typer, no Prefect.
"""
