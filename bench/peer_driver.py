"""Run the peers' driver (``PEERS_DIR/bench.py``) unchanged, and keep its raw latencies.

    PYTHON bench/peer_driver.py PEERS_DIR PEER PHASE [the driver's options]

The driver summarises each pass of latencies as p50, p99 and mean (``common.lat_summary``)
and prints one ``RESULT {json}`` line. This wrapper runs the same ``main()`` with the same
arguments; it only wraps ``lat_summary`` to keep each list it summarises, and adds them to the
RESULT line as ``raw_ms``: one list of milliseconds per ``lat_summary`` call, in call order
(query phase: each vector mode's passes, then each keyword mode's; single phase: the inserts).
bench/peers.py turns them into median / p90 / p99 / max.

Standard library only: it runs under each peer's own venv, which has no kwtree. Its own
directory is taken off ``sys.path`` so that bench/'s modules cannot shadow a peer's imports;
bench/peers.py puts bench/ on PYTHONPATH for the kwtree peer only.
"""

import importlib.util
import os
import sys


def main() -> None:
    peers_dir = os.path.abspath(sys.argv[1])
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        sys.path[0] = peers_dir  # the script's directory, not PYTHONPATH's entries
    else:
        sys.path.insert(0, peers_dir)
    sys.argv = [os.path.join(peers_dir, "bench.py"), *sys.argv[2:]]

    import common  # the driver's helpers: the driver imports this same module object

    raw: list[list[float]] = []
    summarise, emit = common.lat_summary, common.emit

    def lat_summary(lat_s):
        raw.append([round(seconds * 1e3, 5) for seconds in lat_s])
        return summarise(lat_s)

    def emit_with_raw(rec):
        rec["raw_ms"] = raw
        emit(rec)

    common.lat_summary, common.emit = lat_summary, emit_with_raw
    spec = importlib.util.spec_from_file_location("peers_bench_driver", sys.argv[0])
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    driver.main()


if __name__ == "__main__":
    main()
