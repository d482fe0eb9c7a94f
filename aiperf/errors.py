"""The one exception type for a user's mistake.

The CLI prints a UserError as a single line and exits non-zero; anything else is a bug and keeps
its traceback. Raise it with a message that names the bad thing and says how to fix it.
"""


class UserError(Exception):
    """Bad input from the user: a config value, a dataset file, a database URL."""
