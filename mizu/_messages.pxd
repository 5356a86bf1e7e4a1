# The fixed headers of the commonest messages, TASK and RESULT (see
# mizu._protocol), in native byte order: the Executor writes and reads them
# as C structs, without building or unpacking a tuple.

from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t


cdef struct TaskHeader:
    uint8_t tag         # TASK
    uint8_t unused8
    uint16_t unused16
    uint32_t unused32
    uint64_t task_id
    uint64_t fn_id      # a callable the worker has registered


cdef struct ResultHeader:
    uint8_t tag         # RESULT
    uint8_t unused8
    uint16_t sender     # the worker's index
    uint32_t unused32
    uint64_t task_id
    double seconds      # the task's duration
