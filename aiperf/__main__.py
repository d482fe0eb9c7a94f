"""`python -m aiperf ...` runs the `aiperf` command (also installed as `aiperf-automl`)."""

from aiperf.cli.main import main

if __name__ == "__main__":
    main()
