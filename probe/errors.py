"""User-facing errors.

A ``UserError`` is a mistake the user can fix (bad path, bad config, corrupt file). The CLI prints
its message on stderr without a traceback and exits with code 2. Anything else is a bug (exit 1).
"""


class UserError(Exception):
    """A problem with the user's input; the message must say what is wrong and how to fix it."""

    exit_code = 2
