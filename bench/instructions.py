"""Instruction counts per replayed row (valgrind callgrind), a measure the machine's noise
does not move: orjson parsing the lines, kwtree's replay, and a minimal inline loop that
builds the same keyword indexes with no validation.

    .venv/bin/python bench/instructions.py      # needs valgrind; about 2 minutes

Each count is (instructions of a run) - (instructions of the same script stopping before the
measured work), divided by the number of rows.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import core

PROBE = r'''
import gc, os, sys
import orjson
from kwtree.models import EMPTY_METADATA, Keyword
from kwtree.engine.replay import replay_chunk
from kwtree.engine.state import State
log = os.path.join(sys.argv[1], "log")
data = b"".join(open(os.path.join(log, f), "rb").read().rstrip(b"\0") for f in sorted(os.listdir(log)))
mode = sys.argv[2]
gc.disable()
lines = data.split(b"\n")[:-1]
if mode == "parse":
    for line in lines:
        orjson.loads(line)
elif mode == "replay":
    replay_chunk(State(), data, "log", 1)
elif mode == "inline":
    keywords, children, names = {}, {}, {}
    for line in lines:
        r = orjson.loads(line)
        kid = r["id"]
        k = Keyword(kid, r["name"], (), r.get("parent_id"), "", EMPTY_METADATA, r["v"], r["created_at"],
                    r["created_at"], False, r["op"])
        keywords.setdefault(kid, k)
        parent = keywords.get(k.parent_id)
        if parent is not None:
            k.parent_id, k.level = parent.id, parent.level + 1
            siblings = children.get(parent.id)
            if siblings is None:
                children[parent.id] = [kid]
            else:
                siblings.append(kid)
        key = k.name.lower() if k.name.isalnum() else k.name
        found = names.setdefault(key, kid)
        if found is not kid:
            names[key] = [found, kid] if type(found) is str else [*found, kid]
'''


def instructions(probe: Path, data_dir: Path, mode: str) -> int:
    run = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                          str(probe), str(data_dir), mode], capture_output=True, text=True, check=True)
    return int(re.search(r"refs:\s*([\d,]+)", run.stderr).group(1).replace(",", ""))


def keyword_log(data_dir: Path, rows: int) -> None:
    from kwtree import KeywordTree

    with KeywordTree(data_dir, durability="none") as tree:
        ids = ["root"]
        for start in range(0, rows, 10_000):
            recent = ids[-5000:]
            specs = [{"name": f"kw{start + i}", "parent_id": recent[i % len(recent)]} for i in range(10_000)]
            ids += [k.id for k in tree.batch_create_keywords(specs)]


def main() -> int:
    if shutil.which("valgrind") is None:
        print("valgrind is not installed; nothing measured")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        probe = work / "probe.py"
        probe.write_text(PROBE)
        logs = {"mixed": work / "mixed", "keywords": work / "keywords"}
        core.build_log(logs["mixed"], 35_000)
        keyword_log(logs["keywords"], 40_000)
        for name, data_dir in logs.items():
            rows = sum(1 for p in (data_dir / "log").glob("*.jsonl") for _ in p.read_bytes().rstrip(b"\0").splitlines())
            base = instructions(probe, data_dir, "none")
            modes = ("parse", "replay", "inline") if name == "keywords" else ("parse", "replay")
            counts = {mode: (instructions(probe, data_dir, mode) - base) // rows for mode in modes}
            print(f"{name} log, {rows:,} rows: " + ", ".join(f"{m} {c:,} instr/row" for m, c in counts.items())
                  + f"; replay / parse = {counts['replay'] / counts['parse']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
