# Array data born in the arena, for other Cython modules of mizu to call at C speed.

cdef size_t held_bytes() noexcept
