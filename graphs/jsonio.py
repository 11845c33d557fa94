"""Reading JSON input files with errors that name the file and say what is wrong."""

from __future__ import annotations

import json
import os

from .errors import InputError

__all__ = ["read_json", "json_error"]


def read_json(path: str | os.PathLike):
    """The decoded content of a JSON file; :class:`InputError` (naming the file, and the line and column
    of a syntax error) for a missing, unreadable or malformed file."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise InputError("no such file", source=path) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a JSON file", source=path) from None
    except UnicodeDecodeError as e:
        raise InputError(f"not a UTF-8 text file ({e.reason})", source=path) from None
    except json.JSONDecodeError as e:
        raise InputError(f"not valid JSON: {json_error(e)}", source=path) from None
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", source=path) from None


def json_error(e: json.JSONDecodeError) -> str:
    """What is wrong and where: ``Expecting ',' delimiter at line 3, column 7`` (some of json's messages
    end in "at" already: "Unterminated string starting at")."""
    at = "" if e.msg.endswith(" at") else " at"
    return f"{e.msg}{at} line {e.lineno}, column {e.colno}"


def shown(value) -> str:
    """``value`` as it is written in a JSON file (``true``, ``null``, ``"text"``), for an error message
    about a file's field; a value JSON cannot write is shown as Python writes it."""
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)
