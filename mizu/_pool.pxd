# The pool engine, for the Executor and map to call at C speed.

from mizu._manager cimport Manager


cdef class Pool(Manager):
    # The seeds of a seeded Executor's tasks (mizu._seeds.Seeds, mizu._r.streams.Streams), or None: an
    # unseeded pool's submit pays one comparison for them.
    cdef public object seeds
