"""`aiperf ...`: the command line, one module per group of commands.

- main: the app and the run-lifecycle commands (run, runs, show, recover, verify, package, db).
- history: history, compare and report.
- data: `aiperf stage`. flops: `aiperf flops`.
- common: the console, the `--db` option and opening an existing database, shared by all.
"""
