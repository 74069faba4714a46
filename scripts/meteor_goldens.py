"""Regenerate the METEOR 1.5 goldens (tests/data/meteor/*.json.gz) and the Math.pow table with Java.

Run from the repository root on a machine with Java and pycocoevalcap 1.2::

    .venv/bin/python scripts/meteor_goldens.py                 # every set (tests/meteor_inputs.NAMES)
    .venv/bin/python scripts/meteor_goldens.py thumb ptb/thumb # some sets
    .venv/bin/python scripts/meteor_goldens.py --pow           # captioneval/kernels/data/meteor_pow_fixes.txt

Goldens: for each caption set of ``tests/meteor_inputs.py`` (raw and PTB-tokenised), pycocoevalcap's
``meteor-1.5.jar -l en -norm`` (through :class:`captioneval.kernels.meteor.MeteorPool`, the same wire
lines as pycocoevalcap's ``Meteor``) answers each caption's ``SCORE`` request (its statistics line),
then one ``EVAL`` request with all of them (each caption's score and the corpus aggregate). Written
as ``{"set", "n", "inputs_sha256", "stats": [...], "scores": [...], "corpus"}`` (scores as Python
``repr`` of the jar's doubles), gzipped. tests/test_meteor_python.py compares the Python scorer
with them with Java blocked.

``--pow``: compiles a ten-line Java program (needs ``javac``) that prints HotSpot's
``Math.pow(c / (m / 2.0), 0.2)`` for chunks c in 1..256 and matches m in 1..1024, and writes the
fragmentations where Python's ``math.pow`` (C's ``pow``) differs.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import math
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests import meteor_inputs  # noqa: E402

OUT = ROOT / "tests" / "data" / "meteor"

POW_JAVA = """public class PowTable {
    public static void main(String[] a) {
        int C = Integer.parseInt(a[0]), M = Integer.parseInt(a[1]);
        StringBuilder sb = new StringBuilder();
        for (int c = 1; c <= C; c++) for (int m = 1; m <= M; m++) {
            double frag = ((double) c) / (((double) m) / 2);
            sb.append(Double.doubleToRawLongBits(frag)).append(' ')
              .append(Double.doubleToRawLongBits(Math.pow(frag, 0.2))).append('\\n');
        }
        System.out.print(sb);
    }
}
"""


def golden_path(name: str) -> Path:
    return OUT / (name.replace("/", "__") + ".json.gz")


def inputs_sha256(pairs) -> str:
    return hashlib.sha256(json.dumps(pairs, ensure_ascii=False).encode("utf-8")).hexdigest()


def make_golden(name: str) -> dict:
    from captioneval.kernels.meteor import MeteorPool

    pairs = meteor_inputs.pairs(name)
    pool = MeteorPool(1)
    try:
        stats = pool.statistics([c for c, _ in pairs], [r for _, r in pairs])
        scores, corpus = pool._jvms[0].evaluate(stats)
    finally:
        pool.close()
    return {"set": name, "n": len(pairs), "inputs_sha256": inputs_sha256(pairs), "stats": stats,
            "scores": [repr(float(s)) for s in scores], "corpus": repr(float(corpus))}


def make_pow_table(c_max: int = 256, m_max: int = 1024) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "PowTable.java").write_text(POW_JAVA)
        subprocess.run(["javac", "PowTable.java"], cwd=tmp, check=True)
        out = subprocess.run(["java", "-cp", tmp, "PowTable", str(c_max), str(m_max)], check=True,
                             capture_output=True, text=True).stdout

    def d(bits: str) -> float:
        return struct.unpack("<d", struct.pack("<q", int(bits)))[0]

    fixes = {}
    for line in out.splitlines():
        frag, value = (d(x) for x in line.split())
        if math.pow(frag, 0.2) != value:
            fixes[frag] = value
    target = ROOT / "captioneval" / "kernels" / "data" / "meteor_pow_fixes.txt"
    with open(target, "w", encoding="ascii") as fh:
        fh.write("# HotSpot Math.pow(frag, 0.2) where C pow differs: frag = chunks / (matches / 2.0),\n"
                 f"# chunks 1..{c_max}, matches 1..{m_max} (scripts/meteor_goldens.py --pow); float.hex pairs: frag pow\n")
        for frag in sorted(fixes):
            fh.write(f"{frag.hex()} {fixes[frag].hex()}\n")
    print(f"{len(fixes)} of {c_max * m_max} fragmentations differ; wrote {target}")


def main(argv: list[str]) -> int:
    if argv == ["--pow"]:
        make_pow_table()
        return 0
    names = argv or meteor_inputs.NAMES
    OUT.mkdir(parents=True, exist_ok=True)
    for name in names:
        began = time.perf_counter()
        golden = make_golden(name)
        with gzip.open(golden_path(name), "wt", encoding="utf-8", compresslevel=9) as fh:
            json.dump(golden, fh, ensure_ascii=False, separators=(",", ":"))
        print(f"{name}: {golden['n']} captions, corpus {golden['corpus']}, {time.perf_counter() - began:.1f} s",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
