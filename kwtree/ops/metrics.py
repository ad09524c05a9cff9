"""Shape and size figures of the live tree (``KeywordTree.tree_metrics``)."""

from __future__ import annotations

from typing import Any

from kwtree.engine.state import State
from kwtree.models import ROOT_ID

__all__ = ["WIDE_FANOUT", "tree_metrics"]

#: A keyword with more children than this is counted in ``nodes_over_50_children``.
WIDE_FANOUT = 50


def tree_metrics(state: State) -> dict[str, Any]:
    """Counts of live entities (the root is not counted as a keyword; links and relations
    count only when both ends are live), depth (root = 0) and fan-out figures, and the
    number of operations applied. The caller adds the log's size on disk."""
    live_keywords = [k for k in state.keywords.values() if not k.deleted and k.id != ROOT_ID]
    live_ids = {k.id for k in live_keywords}
    live_ids.add(ROOT_ID)
    live_infos = {i.id for i in state.infos.values() if not i.deleted}
    links = sum(
        1
        for (info_id, kid), link in state.links.items()
        if not link.deleted and info_id in live_infos and kid in live_ids
    )
    relations = sum(
        1
        for (src, dst, _), rel in state.relations.items()
        if not rel.deleted and src in live_ids and dst in live_ids
    )
    linked = {
        info_id for info_id, kids in state.keywords_by_info.items() if any(kid in live_ids for kid in kids)
    }
    depths = [k.level for k in live_keywords]
    fanouts = [len(children) for children in state.children.values() if children]
    return {
        "keywords": len(live_keywords),
        "infos": len(live_infos),
        "links": links,
        "relations": relations,
        "depth_max": max(depths, default=0),
        "depth_mean": sum(depths) / len(depths) if depths else 0.0,
        "fanout_max": max(fanouts, default=0),
        "fanout_mean": sum(fanouts) / len(fanouts) if fanouts else 0.0,
        "nodes_over_50_children": sum(1 for n in fanouts if n > WIDE_FANOUT),
        "infos_without_link": len(live_infos - linked),
        "operations": state.op_count,
    }
