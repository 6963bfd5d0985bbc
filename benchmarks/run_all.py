"""Run every benchmark side by side with its reference: ``pypto-async bench``.

``python benchmarks/run_all.py [--quick] [--json PATH] [--only NAME ...]`` is the
same as ``pypto-async bench ...``: each ``benchmarks/bench_*.py`` runs in its own
process with ``--json``, and one table of figure, reference, ratio and target is
printed (see pypto_async/_bench.py for the convention the scripts follow).
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from pypto_async._cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
