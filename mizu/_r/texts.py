"""How a pool's messages name an R call."""

import re

__all__ = ["function_label"]

_NAME = re.compile(r"(?:[A-Za-z][\w.]*:::?)?[A-Za-z.][\w.]*")   # mean, stats::median


def function_label(fn, short_repr):
    """An R function (a str) as R would call it: by its name, or its source (cut short by short_repr) in parentheses."""
    return fn if _NAME.fullmatch(fn) else f"({short_repr(fn)[1:-1]})"
