"""``kwtree.git``: versioning a memory directory with git, importable by its public name
(``import kwtree.git`` or ``from kwtree.git import setup``). Everything is
``kwtree.ops.git``'s (its docstring tells what ``setup`` and the merge driver do); this
module only gives it the name the docs use."""

from kwtree.ops.git import *  # noqa: F403  (the public name of kwtree.ops.git's whole surface)
from kwtree.ops.git import __all__ as __all__
