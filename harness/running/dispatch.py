"""Which idle worker gets which chunk, where its GPU's memory allows (``memory_gate``): the event loop's
(``isolation``) one decision per turn."""

from . import placement
from .memory_gate import MemoryGate
from .worker import State


def hand_out(todo: list, pool: list, memory: MemoryGate, place=None, sets=(), held: bool = False, beside=()):
    """Give each idle worker of ``place``'s set in ``pool`` its next chunk from ``todo`` where memory
    allows; with none left it may run, retire it, unless chunks are ``held`` back for later (then it waits).
    Where no chunk fits, the idle workers that kept a cache are told to empty it.  Memory is the set's own
    (one GPU's): other sets' workers do not count; ``beside``, other backends' workers on it, do."""
    mine = [w for w in pool if getattr(w, "place", None) is place]
    allowed = (lambda chunk: placement.may_run(chunk, place, sets)) if sets else None
    for w in mine:
        if not w.idle():
            continue
        if not todo and held:
            continue
        if not todo or (allowed is not None and not any(map(allowed, todo))):
            w.retire()
            pool.remove(w)
            continue
        others = [o for o in mine if o is not w] + list(beside)
        alone = not any(o.may_hand_back() for o in others)
        i = memory.pick(todo, sum(o.footprint() for o in others), w.cache, alone, allowed)
        if i is not None:
            chunk = todo.pop(i)
            w.send(chunk, memory.holds(chunk))
            continue
        for o in mine:
            if o.state is State.CACHED:
                o.empty_cache()
