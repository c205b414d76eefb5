"""The shared guards for untrusted names: control characters escaped for the terminal, non-regular files refused."""

from __future__ import annotations

import os
import threading

import pytest

from common.paths import NotRegularError, open_regular, require_regular
from common.text import printable


def test_printable_escapes_terminal_controls():
    """OSC 52 (clipboard), ESC, BEL, C1 and line separators come out as escapes; plain text is unchanged."""
    osc52 = "cat\x1b]52;c;ZWNobyBoaQ==\x07"
    assert printable(osc52) == "cat\\x1b]52;c;ZWNobyBoaQ==\\x07"
    assert printable("a\x9bb\u2028c\x7f") == "a\\x9bb\\u2028c\\x7f"
    assert printable("plain: ä, 猫") == "plain: ä, 猫"
    assert printable("two\nlines\tand a tab") == "two\\x0alines\\x09and a tab"
    assert printable("two\nlines\x1b[2J", lines=True) == "two\nlines\\x1b[2J"


def test_printable_shows_undecodable_bytes():
    """A file name that is not UTF-8 (surrogate-escaped by Python) is shown with its bytes escaped, never a crash."""
    name = os.fsdecode(b"bad\xffname")
    assert printable(name) == "bad\\xffname"


def test_fifo_is_refused_without_blocking(tmp_path):
    """A FIFO where a file is expected is refused at once by both checks; a regular file reads normally."""
    fifo = tmp_path / "data.h5"
    os.mkfifo(fifo)
    done = []

    def attempt():
        for check in (lambda: require_regular(fifo), lambda: open_regular(fifo)):
            with pytest.raises(NotRegularError, match="FIFO"):
                check()
        done.append(True)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(5)
    assert done == [True], "a check blocked on the FIFO"
    regular = tmp_path / "ok.bin"
    regular.write_bytes(b"abc")
    require_regular(regular)
    with open_regular(regular) as f:
        assert f.read() == b"abc"
    with pytest.raises(NotRegularError, match="directory"):
        require_regular(tmp_path)
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "missing")
