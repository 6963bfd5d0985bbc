"""The Qwen3-14B decode layer's idle-with-ready-work shares on the a2a3 profile, beside PyPTO's.

Runs ``tests/models/decode_program.py`` at Qwen3-14B's shapes (hidden 5120, 40/8 heads,
head_dim 128, intermediate 17408, batch 16, 4096-token caches, 256-column output chunks) once
on ``platform="a2a3sim"`` with the chip swimlane and the dependency file on, then prints
``pypto-async analyze``'s report of the records beside PyPTO's published onboard shares
(15.0 % cube, 10.3 % vector; docs/models.md explains the difference).  About a minute and
2 GB of memory on two CPUs.

    python benchmarks/qwen3_14b_idle.py [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "models"))

PYPTO = {"aic": 15.0, "aiv": 10.3}  # PyPTO's performance guide, pypto-lib's 14B decode_layer onboard


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="where the DFX outputs go (default: a temporary directory)")
    args = parser.parse_args(argv)
    import decode_program as dp

    from pypto_async._analyze import analyze_files, format_analysis
    from pypto_async.runtime import RunConfig

    out = Path(args.out or tempfile.mkdtemp(prefix="qwen3_14b_"))
    c = dp.Shape(batch=16, num_heads=40, num_kv_heads=8, head_dim=128, intermediate=17408, max_seq=4096,
                 seq_tile=256, k_chunk=128, n_chunk=256)
    kernel, inputs = dp.build(c), dp.inputs(c, seed=2)
    kernel(*inputs.values(), config=RunConfig(platform="a2a3sim", device_memory=8 << 30, enable_chip_swimlane=1,
                                              enable_dep_gen=True, save_kernels_dir=str(out)))
    dfx = out / "dfx_outputs"
    a = analyze_files(dfx / "l2_swimlane_records.json", dfx / "deps.json")
    print(format_analysis(a))
    print(f"\nPyPTO (pypto-lib's 14B decode_layer, onboard): cube {PYPTO['aic']:.1f}%, vector {PYPTO['aiv']:.1f}% "
          "idle with ready work; records in", dfx)
    return 0


if __name__ == "__main__":
    sys.exit(main())
