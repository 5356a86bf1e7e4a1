# The fast state changes of mizu._future, for the Executor to call at C speed.

cpdef bint set_running(object future) except -1
cpdef set_result(object future, object result)
cpdef set_exception(object future, object exception)
