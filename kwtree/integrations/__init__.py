"""kwtree handed to agents: one catalog of memory tools (``kwtree.integrations.catalog``) served
over the Model Context Protocol (``.mcp``, ``kwtree mcp DIR``), to the Anthropic Messages API's
tool-use loop in-process (``.anthropic``) and to Claude Code's hooks (``.claude_code``).

Every door runs the same tools through one :class:`kwtree.integrations.toolbox.ToolBox`: the
same argument checks, scope pinning, read-only refusal, bounded results and error texts.

Layering: it works on the facade's public methods (and the scope paths and commit options they
take), above every other package of the library; only the CLI imports it.
"""
