"""`aiperf ...`: the command line, one module per group of commands.

- main: the app, its options, every command registered in `aiperf --help`'s order, and `main()`.
- run: `aiperf run`, its options read into one config; benchmark: one run of the flow with its live
  line and score; series: `run --repeat`; exit_codes: the exit status a run ends with.
- runs: runs, show and recover. verify: `aiperf verify`. package: `aiperf package`. db: `db upgrade`.
- history: history, compare and report. data: `aiperf stage`. flops: `aiperf flops`.
  rules: `aiperf rules`. results: the `aiperf results` group. as_json: --json's shapes.
- common: the console, the `--db` option and opening an existing database, shared by all.
"""
