# The pool engine, for the Executor and map to call at C speed.

from mizu._manager cimport Manager


cdef class Pool(Manager):
    pass
