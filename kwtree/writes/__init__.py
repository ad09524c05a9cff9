"""Write deciders: each takes the current State, the new operation's stamp and the caller's
arguments, checks them, and returns the Changes to commit (an empty list when there is nothing
to do). They never touch the State or the disk, so a decider that raises leaves everything as
it was; the engine commits what they return and applies it. They may import the ground floor
and the engine's State and codec; nothing else."""

from __future__ import annotations

import os

from kwtree.engine.events import Stamp
from kwtree.engine.state import State
from kwtree.errors import KwtreeError, NotFoundError
from kwtree.models import Info, Keyword
from kwtree.validate import clean_id

__all__ = ["Stamp", "name_in_message", "new_ids", "require_info", "require_keyword"]


#: Byte maps that set a random byte's top bits: the UUID version (4) and the RFC 4122 variant.
_VERSION_4 = bytes((b & 0x0F) | 0x40 for b in range(256))
_VARIANT = bytes((b & 0x3F) | 0x80 for b in range(256))


def new_ids(count: int) -> list[str]:
    """``count`` random UUID4 ids as 32 lowercase hex digits (one read of the OS's randomness)."""
    raw = bytearray(os.urandom(16 * count))
    raw[6::16] = raw[6::16].translate(_VERSION_4)  # every id's byte 6 at once, in C
    raw[8::16] = raw[8::16].translate(_VARIANT)
    hexed = raw.hex()
    return [hexed[i : i + 32] for i in range(0, 32 * count, 32)]


def require_keyword(state: State, keyword_id: object, field: str = "keyword_id") -> Keyword:
    """The live keyword ``keyword_id`` names, or NotFoundError saying why not."""
    kid = clean_id(keyword_id, field)
    keyword = state.keywords.get(kid)
    if keyword is None:
        raise NotFoundError(f"{field}: no keyword has id {kid!r}")
    if keyword.deleted:
        raise NotFoundError(f"{field}: keyword {kid!r} ({keyword.name!r}) was deleted by operation {keyword.op_id}")
    return keyword


def require_info(state: State, info_id: object, field: str = "info_id") -> Info:
    """The live info ``info_id`` names, or NotFoundError saying why not."""
    iid = clean_id(info_id, field)
    info = state.infos.get(iid)
    if info is None:
        raise NotFoundError(f"{field}: no info has id {iid!r}")
    if info.deleted:
        raise NotFoundError(f"{field}: info {iid!r} was deleted by operation {info.op_id}")
    return info


def name_in_message(exc: KwtreeError, name: str, *, instead_of: str = "") -> None:
    """Say in ``exc``'s message which item of a batch or list was wrong (the caller raises it
    again): ``name`` before the message, or in place of its start ``instead_of`` (the field
    it names). Built only on the failing path, so a batch pays nothing for it."""
    message = exc.args[0]
    if instead_of and message.startswith(instead_of):
        message = message[len(instead_of):]
    exc.args = (f"{name}{message}", *exc.args[1:])
