"""Bindings over the shared-memory core: segments, rings, peer watches and the usable-CPU count.

These are the building blocks of the Executor. A `Segment` is one anonymous
shared mapping; rings live inside it at fixed offsets, so any process that
holds the segment can attach to them. Segments and rings pickle by reference
(the segment's descriptor travels through multiprocessing), so they can be
passed to ``multiprocessing.Process`` whatever the start method.

Each concept is bound in a module named for its header in ``csrc/``:
`mizu._segment`, `mizu._rings`, `mizu._liveness`, `mizu._waiter` and
`mizu._cpus`. This module gathers their public names.
"""

from mizu._cpus import usable_cpus
from mizu._liveness import PeerDiedError, PeerWatch
from mizu._rings import MpmcRing, SpscRing
from mizu._segment import Segment

__all__ = ["Segment", "SpscRing", "MpmcRing", "PeerWatch", "PeerDiedError", "usable_cpus"]
