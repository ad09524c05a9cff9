"""``recall`` over MCP: the round trip of the tool through ``kwtree mcp`` on stdio (the official
SDK's client, the server in a subprocess), next to the same call in-process, and the server's
start time to its first answer.

The tree holds the first LoCoMo conversations of ../shared/data/locomo_dev.json, committed
session by session into one scope each (offline extractor, turns kept), with every vector
indexed. Each of the conversations' questions is asked three ways, in the same run:
``KeywordTree.recall`` (the library call), ``ToolBox.call("recall")`` in-process (what the
server runs: argument checks, catching up with the log, the scope, the bounded JSON reply), and
``session.call_tool("recall")`` over stdio. Start: from spawning ``python -m kwtree mcp DIR`` to
the first ``recall`` result (the SDK's handshake included), on the same tree, several times.

    .venv/bin/python bench/mcp_recall.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import anyio  # noqa: E402
from memory_commit import DATA, sessions  # noqa: E402
from stats import cell, summary  # noqa: E402

from kwtree import KeywordTree  # noqa: E402
from kwtree.integrations.toolbox import ToolBox  # noqa: E402


def _seed(directory: Path, samples: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Commit the samples' sessions; returns (scope, question) pairs."""
    asked: list[tuple[str, str]] = []
    with KeywordTree(directory) as tree:
        for sample in samples:
            scope = f"user:{sample['sample_id']}"
            for session_id, _, messages in sessions(sample):
                tree.commit_session(messages, session_id=session_id, scope=scope)
            asked += [(scope, str(qa["question"])) for qa in sample["qa"]]
        tree.wait_indexed(600)
    return asked


def _in_process(directory: Path, asked: list[tuple[str, str]]) -> tuple[list[float], list[float]]:
    library_ms: list[float] = []
    toolbox_ms: list[float] = []
    with KeywordTree(directory, read_only=True) as tree:
        box = ToolBox(tree)
        for scope, question in asked:  # a first pass warms the caches for both
            tree.recall(question, 10, scope=scope)
        for scope, question in asked:
            started = time.perf_counter()
            tree.recall(question, 10, scope=scope)
            library_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            reply = box.call("recall", {"query": question, "scope": scope})
            toolbox_ms.append((time.perf_counter() - started) * 1000)
            assert not reply.is_error, reply.text
    return library_ms, toolbox_ms


def _params(directory: Path) -> Any:
    from mcp import StdioServerParameters

    return StdioServerParameters(command=sys.executable, args=["-m", "kwtree", "mcp", str(directory), "--read-only"])


def _over_stdio(directory: Path, asked: list[tuple[str, str]]) -> list[float]:
    from mcp import ClientSession, stdio_client

    samples: list[float] = []

    async def main() -> None:
        async with stdio_client(_params(directory)) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for scope, question in asked:  # the same warm-up as in-process
                await session.call_tool("recall", {"query": question, "scope": scope})
            for scope, question in asked:
                started = time.perf_counter()
                result = await session.call_tool("recall", {"query": question, "scope": scope})
                samples.append((time.perf_counter() - started) * 1000)
                assert not result.is_error, result.content[0].text

    anyio.run(main)
    return samples


def _starts(directory: Path, question: tuple[str, str], runs: int) -> list[float]:
    from mcp import ClientSession, stdio_client

    samples: list[float] = []

    async def once() -> None:
        started = time.perf_counter()
        async with stdio_client(_params(directory)) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("recall", {"query": question[1], "scope": question[0]})
            samples.append((time.perf_counter() - started) * 1000)
            assert not result.is_error

    for _ in range(runs):
        anyio.run(once)
    return samples


def _imports(runs: int) -> list[float]:
    """Spawning Python that only imports what the server imports, then exits (the start's floor)."""
    import subprocess

    samples: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import mcp.server, kwtree.facade.tree, kwtree.integrations.mcp"],
                       check=True)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def run(quick: bool = False, work: Path | None = None, conversations: int | None = None,
        questions: int | None = None) -> dict[str, Any]:
    """The timings over the first ``conversations`` (1 quick, 2 full) and at most ``questions``
    of their questions."""
    samples = json.loads(DATA.read_text())[: conversations or (1 if quick else 2)]
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        directory = Path(tmp) / "memory"
        asked = _seed(directory, samples)[:questions]
        library_ms, toolbox_ms = _in_process(directory, asked)
        stdio_ms = _over_stdio(directory, asked)
        start_ms = _starts(directory, asked[0], 3 if quick else 10)
        import_ms = _imports(3 if quick else 10)
        with KeywordTree(directory, read_only=True) as tree:
            memories = tree.tree_metrics()["infos"]
    return {"conversations": len(samples), "questions": len(asked), "infos": memories,
            "recall": summary(library_ms), "toolbox": summary(toolbox_ms), "stdio": summary(stdio_ms),
            "start": summary(start_ms), "imports": summary(import_ms),
            "raw_ms": {"stdio": stdio_ms, "start": start_ms}}


def markdown(result: dict[str, Any]) -> str:
    rows = [("`KeywordTree.recall` in-process (the library call)", result["recall"]),
            ("`ToolBox.call(\"recall\")` in-process (what the server runs: checks, catch-up, JSON reply)",
             result["toolbox"]),
            ("`recall` over MCP stdio (`kwtree mcp`, the SDK's `ClientSession.call_tool`)", result["stdio"])]
    stdio, library = result["stdio"], result["recall"]
    return "\n".join([
        "### MCP: `recall` over stdio, and the server's start",
        "",
        f"{result['questions']} LoCoMo questions, each in its conversation's scope, against a tree of "
        f"{result['conversations']} committed conversations ({result['infos']:,} infos); k=10, warm caches, "
        "the server read-only in a subprocess on the same machine.",
        "",
        "| call | ms: median / p90 / p99 / max |",
        "|---|---|",
        *(f"| {name} | {cell(row, 2)} |" for name, row in rows),
        f"| start: spawn `kwtree mcp` → handshake → first `recall` result ({result['start']['n']} runs) | "
        f"{cell(result['start'], 0)} |",
        f"| baseline: spawn Python, import the SDK and kwtree's server modules, exit | {cell(result['imports'], 0)} |",
        "",
        f"Over stdio p50 {stdio['median']:.2f} ms, p99 {stdio['p99']:.2f} ms: "
        f"{stdio['median'] - library['median']:+.2f} ms at the median over the library call "
        f"({stdio['median'] / library['median']:.1f}×). Spawning Python and importing alone takes "
        f"{result['imports']['median']:,.0f} ms, next to the start's {result['start']['median']:,.0f} ms (medians).",
    ])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(markdown(run(args.quick)))
