# Wire values to R and back, and the views of arena blocks they use. Internal:
# the worker loop calls the same C++ directly; these serve tests and debugging.

# The R value of a wire message (a raw vector). `records` holds the 64-byte
# out-of-band buffer records (csrc/messages.hpp) its arena arrays name, and
# `fds[d + 1]` a descriptor, open in this process, of the segment of the
# records whose descriptor is d, or NA to reach it through /proc/<pid>/fd of
# the process that shared it.
decode <- function(message, records = raw(), fds = integer()) {
    .Call(C_decode, message, records, as.integer(fds))
}

# list(message =, records =, fds =): the wire message of `value`, its arrays
# of more than `inline_limit` bytes in blocks of this process's arena, their
# out-of-band records (whose references the receiver adopts) and their
# segments' descriptors here.
encode <- function(value, inline_limit = 65536) {
    .Call(C_encode, value, as.double(inline_limit))
}

# A view of the first `count` elements of an arena block, adopting the
# reference (arena_id as 16 hex digits) that its sender took for this process.
block_view <- function(fd, arena_id, segment_id, offset, length, generation, type, count) {
    .Call(C_block_view, as.integer(fd), arena_id, as.double(segment_id), as.double(offset),
          as.double(length), as.double(generation), type, as.double(count))
}

# NULL for a vector that is no view; else where its data lives.
view_info <- function(x) .Call(C_view_info, x)

# How many views were made and released, how often R duplicated one by
# copying its bytes (copies) or as a new view of its block (remaps), and how
# often it asked one for a pointer it may write through, since the last reset.
view_counters <- function(reset = FALSE) .Call(C_view_counters, reset)

# The blocks of this process's arena in use (results not yet released).
arena_stats <- function() .Call(C_arena_stats)
