"""The demo's screen: the header first, the progress bar under it, then the bar gone."""

from __future__ import annotations

import io
import sys

from pypto_async._cli import main

ARGS = ["demo", "--batches", "6", "--rows", "64", "--cols", "128", "--no-png"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_is_drawn_under_the_header_and_erased(tmp_path, monkeypatch):
    screen = _Terminal()  # stdout and stderr on one terminal, in the order they were written
    monkeypatch.setattr(sys, "stdout", screen)
    monkeypatch.setattr(sys, "stderr", screen)
    assert main([*ARGS, "--out", str(tmp_path)]) == 0
    text = screen.getvalue()
    header = text.index("  sim device:")
    bar = text.index("%|")  # tqdm's bar: "pipelined:  0%|..."
    assert header < bar, text
    assert text.count("pypto_async demo:") == 1, text
    # After the bar's last drawing, it is erased ("\r", blanks, "\r") before the report goes on.
    last = text.rindex("%|")
    rest = text[last:]
    erased = rest[rest.index("\r"):rest.index("  serial (1 stream)")]
    assert erased.strip() == "" and erased.endswith("\r"), repr(erased)


def test_no_bar_when_stderr_is_not_a_terminal(tmp_path, capsys):
    assert main([*ARGS, "--out", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "%|" not in err and "%|" not in out, err
    lines = out.splitlines()
    assert lines[0].startswith("pypto_async demo:") and lines[1].startswith("  sim device:")
    assert lines[2].startswith("  serial (1 stream)"), out
