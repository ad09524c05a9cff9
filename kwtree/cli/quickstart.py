"""The quickstart: build a memory tree from the shipped sample outline, offline, and show
what kwtree keeps and how to look things up, change them and take changes back."""

from __future__ import annotations

import tempfile
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree as RichTree

from kwtree.cli.outline import load_outline
from kwtree.errors import InvalidInputError
from kwtree.facade.tree import KeywordTree
from kwtree.models import ROOT_ID

__all__ = ["DEFAULT_OUTLINE", "render_tree", "run_quickstart"]

#: The sample outline in a source checkout (``data/`` next to the package).
DEFAULT_OUTLINE = Path(__file__).resolve().parents[2] / "data" / "quickstart.json"


def render_tree(tree: KeywordTree, root_id: str = ROOT_ID, max_depth: int | None = None) -> RichTree:
    """A rich Tree of the keywords under ``root_id`` with their aliases and info counts."""

    def label(keyword_id: str) -> str:
        keyword = tree.get_keyword(keyword_id)
        text = f"[bold]{escape(keyword.name)}[/bold]"  # names are data, not rich markup
        if keyword.aliases:
            text += " [dim](" + escape(", ".join(keyword.aliases)) + ")[/dim]"
        count = len(tree.get_infos_of_keyword(keyword_id, size=10_000))
        if count:
            text += f" [cyan]· {count} info{'s' if count != 1 else ''}[/cyan]"
        return text

    out = RichTree(label(root_id))
    stack = [(root_id, out, 0)]
    while stack:
        node, branch, depth = stack.pop()
        if max_depth is not None and depth >= max_depth:
            continue
        children = tree.get_children(node)
        for child in children:  # added in order, so siblings print in order
            stack.append((child.id, branch.add(label(child.id)), depth + 1))
    return out


def run_quickstart(data_dir: Path | None = None, console: Console | None = None) -> Path:
    """Build the sample tree from ``DEFAULT_OUTLINE`` in ``data_dir`` (a new temporary
    directory when None), print a tour of it, and return the directory. (To load other
    outlines use ``kwtree.cli.outline.load_outline`` or ``kwtree load``.)"""
    console = console or Console()
    outline = DEFAULT_OUTLINE
    if not outline.exists():
        raise InvalidInputError(f"sample outline {outline} not found; the quickstart runs from a source checkout")
    data_dir = data_dir or Path(tempfile.mkdtemp(prefix="kwtree-quickstart-")) / "memory"
    if data_dir.exists() and any(data_dir.iterdir()):
        raise InvalidInputError(f"the quickstart builds a new tree: {data_dir} is not empty; pass a new directory")
    with KeywordTree(data_dir) as tree:
        loaded = load_outline(tree, outline)
        ids = loaded.keyword_ids
        console.rule("[bold]kwtree quickstart")
        console.print(f"Loaded {outline.name} into [bold]{data_dir}[/bold]: {len(ids)} keywords, "
                      f"{loaded.infos} memories, {loaded.relations} relations — one durable operation.\n")
        console.print(render_tree(tree))

        console.rule("Exact lookups (case, width, punctuation and spacing ignored)")
        lookups = Table("you ask for", "finds", "path")
        for query in ("PY", "Ｐｙｔｈｏｎ", "k8s", "川菜", "pager-duty", "postgres"):
            for keyword in tree.find_keywords(query) or []:
                path = " › ".join(k.name for k in tree.get_path(keyword.id)[1:])
                lookups.add_row(repr(query), keyword.name, path)
        console.print(lookups)

        console.rule("Memories linked to 'Billing Service'")
        for info in tree.get_infos_of_keyword(ids["billing"]):
            console.print(f"• {escape(info.content)} [dim]({escape(info.source)})[/dim]")
        console.print()
        for relation in tree.get_relations(ids["billing"], direction="both"):
            ends = (tree.get_keyword(relation.from_id).name, tree.get_keyword(relation.to_id).name)
            console.print(f"relation: {ends[0]} —{relation.type}→ {ends[1]}")

        console.rule("The agent (offline navigator: no LLM, no API key)")
        for query in ("pythn", "postgress"):
            found = tree.search(query)
            where = " › ".join(k.name for k in found.path[1:]) if found.node else found.reason
            console.print(f"search {query!r}: {found.status.value} → {escape(where)} [dim]({found.rounds} round)[/dim]")
        for name, description in (("Ramen", "Japanese noodle soup, a favourite food"),
                                  ("Osaka", "a travel destination in Japan")):
            placed = tree.create_keyword(name, description=description)
            path = " › ".join(k.name for k in tree.get_path(placed.id)[1:-1])  # the path to its parent
            console.print(f"create_keyword({name!r}) with no parent: placed under {escape(path)}")
        memo = tree.create_info("Ravi fixed the billing retries bug during on-call week.", auto_link=True)
        linked = ", ".join(f"{k.name} ({relation.value})" for k, relation in tree.get_keywords_of_info(memo.id))
        console.print(f"create_info(..., auto_link=True) linked it to: {escape(linked)}")
        audit = tree.history(entity_id=memo.id)[0].audit
        assert audit is not None  # an auto-linked info's operation records the agent's decision
        decided = audit["agent"]
        console.print(f"[dim]each agent decision is kept with its operation: {len(decided['rounds'])} round(s), "
                      f"navigator {decided['navigator']!r}, outcome {decided['outcome']['status']!r}[/dim]")

        console.rule("Recall: full text + vectors + the tree (offline embedder)")
        tree.wait_indexed(30)  # the embeddings are made in the background; wait for them here
        for hit in tree.recall("how are failed payments retried", k=3):
            where = "; ".join(" › ".join(k.name for k in linked.path[1:]) for linked in hit.keywords)
            console.print(f"{hit.score:.2f}  {escape(hit.info.content)} [dim]({escape(where)})[/dim]")
        console.print("\ncontext('billing', max_tokens=80) — prompt-ready:\n")
        console.print(escape(tree.context("billing", max_tokens=80)))

        console.rule("Change, audit, undo")
        moved = tree.move_keyword(ids["coffee"], ids["prefs"])
        console.print("moved Coffee under: " + " › ".join(k.name for k in tree.get_path(moved.id)[1:]))
        last = tree.history(entity_id=ids["coffee"], limit=1)[0]
        console.print(f"history: operation {last.op_id} ({last.kind} by {last.actor})")
        tree.undo(last.op_id)
        console.print("after undo: " + " › ".join(k.name for k in tree.get_path(ids["coffee"])[1:]))

        console.rule("Tree metrics")
        metrics = tree.tree_metrics()
        table = Table("metric", "value")
        for key, value in metrics.items():
            table.add_row(key, f"{value:.2f}" if isinstance(value, float) else str(value))
        console.print(table)
    with KeywordTree(data_dir, read_only=True) as reopened:
        same = reopened.get_path(ids["asyncio"])
        console.print(f"\nReopened from the log alone: asyncio is still at {' › '.join(k.name for k in same[1:])}.")
    console.print(f"The event log lives in {data_dir / 'log'}; try `kwtree tree {data_dir}`.")
    return data_dir
