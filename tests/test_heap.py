"""``kwtree.heap.collector_paused`` from several threads at once: the collector is back on
when the last of them is done (found by review: two threads could interleave between reading
``gc.isenabled()`` and ``gc.disable()`` and leave it off for good)."""

from __future__ import annotations

import gc
import sys
import threading

from kwtree.heap import collector_paused


def test_the_collector_is_on_again_after_threads_pause_it_at_once() -> None:
    assert gc.isenabled()
    start = threading.Barrier(4)
    on_inside: list[bool] = []  # (a pause that found the collector on, another thread's exit having turned it on)

    def pause_often() -> None:
        start.wait()
        for _ in range(20_000):
            with collector_paused():
                if gc.isenabled():
                    on_inside.append(True)

    threads = [threading.Thread(target=pause_often) for _ in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # (threads switch between any two steps: the race shows at once)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert gc.isenabled() and not on_inside


def test_a_collector_off_before_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
