"""The ``kwtree`` command: its argument table and main, the printers, the quickstart tour, the
outline loader and the embedding worker process. It sits on top and may import anything;
nothing in the library imports it."""
