"""Strings from data reach the terminal escaped: the one function every printed message with such a string uses.

Names, classes, commands and paths inside a prepared directory, a results directory or a checkpoint are untrusted
input. Printed raw, an escape sequence among them drives the terminal (OSC 52 writes the clipboard, others move the
cursor or rewrite earlier lines), and a file name that is not UTF-8 crashes the encoder. `printable` shows both as
Python escapes: control characters (C0, DEL, C1 and the Unicode line and paragraph separators) as `\\x1b`, `\\u2028`,
undecodable bytes as `\\xff`."""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, C1 controls, and the separators some terminals treat as newlines
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_ALL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object, *, lines: bool = False) -> str:
    """`text` as str with every control character escaped; `lines=True` keeps newlines and tabs (a message of several
    lines), otherwise they are escaped too (a single value: a class name, a path)."""
    text = str(text).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return (_CONTROL if lines else _CONTROL_ALL).sub(_escape, text)
