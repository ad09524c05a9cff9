"""Retrieval: exact lookup of keywords by name and alias, recall fusion (BM25, vectors, the
tree and relations, scored and weighted), scopes (whose memories a read may see), keyword
abstracts as signposts, the relevance floor, the time window (and the one a query names), the
context block rendered for a prompt, and the fence that quotes every stored text shown to a
model (``fence``: recalled data, never instructions). Pure functions over a State and the caches' hits; it
may import the ground floor, the engine and the agent's descent results
(``kwtree.agent.descend``, which exact lookup turns into search results), and never touches
storage."""
