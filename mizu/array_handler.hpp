// numpy's data-memory handler (NEP 49) over an ArrayData: array data of at
// least its threshold comes from the arena, everything else from the
// handler that was current before, which also takes what the arena cannot.
//
// Only mizu._array_data includes this, and calls install_array_handler only
// once numpy is imported: the module itself must not import numpy.
#pragma once

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
// The handler functions came with numpy 1.22; mizu needs 1.25 at run time.
#define NPY_TARGET_VERSION NPY_1_25_API_VERSION
#include <Python.h>
#include <numpy/arrayobject.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <pthread.h>

#include "array_data.hpp"

namespace mizu {

namespace array_handler {

// Set by install_array_handler with the GIL held, before numpy can call
// the functions below, and again in a forked child that installs its own;
// never freed, since arrays made under the handler may outlive every Python
// object.
inline ArrayData* data = nullptr;
inline PyDataMemAllocator below{};   // the handler that was current before
inline PyObject* below_capsule = nullptr;

inline void* allocate(void*, std::size_t size) {
    if (void* p = data->allocate(size)) return p;
    return below.malloc(below.ctx, size);
}

inline void* allocate_zeroed(void*, std::size_t count, std::size_t item) {
    std::size_t size;
    if (!__builtin_mul_overflow(count, item, &size))
        if (void* p = data->allocate(size)) return std::memset(p, 0, size);
    return below.calloc(below.ctx, count, item);
}

inline void* reallocate(void*, void* ptr, std::size_t size) {
    std::size_t length;
    if (ptr == nullptr || !data->holds(ptr, &length)) return below.realloc(below.ctx, ptr, size);
    void* moved = data->allocate(size);
    if (moved == nullptr) moved = below.malloc(below.ctx, size ? size : 1);
    if (moved == nullptr) return nullptr;
    std::memcpy(moved, ptr, std::min(length, size));
    data->free(ptr);
    return moved;
}

inline void release(void*, void* ptr, std::size_t size) {
    if (ptr != nullptr && data->free(ptr)) return;
    below.free(below.ctx, ptr, size);
}

inline PyDataMem_Handler handler = {
    "mizu_arena", 1, {nullptr, allocate, allocate_zeroed, reallocate, release}};

// pthread_atfork's steps; `data` does not change across a fork (it
// changes with the GIL held, which the forking thread holds).
inline bool fork_steps = false;
inline void prepare_fork() {
    if (data) data->prepare_fork();
}
inline void after_fork_parent() {
    if (data) data->after_fork_parent();
}
inline void after_fork_child() {
    if (data) data->after_fork_child();
}

}  // namespace array_handler

// Makes `owner` the allocator of large array data in this thread's context
// (numpy keeps its handler in a context variable) and of every context
// copied from it later. Returns 0, or -1 with a Python error set. Once per
// process: a forked child's owner inherits its parent's (ArrayData), which
// the handler's functions then reach through it.
inline int install_array_handler(ArrayData* owner) {
    namespace h = array_handler;
    if (PyArray_API == nullptr && _import_array() < 0) return -1;
    if (!h::fork_steps) {
        if (int rc = pthread_atfork(h::prepare_fork, h::after_fork_parent, h::after_fork_child)) {
            errno = rc;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        h::fork_steps = true;
    }
    if (h::data == nullptr) {
        PyObject* current = PyDataMem_GetHandler();
        if (current == nullptr) return -1;
        auto* was = static_cast<PyDataMem_Handler*>(PyCapsule_GetPointer(current, "mem_handler"));
        if (was == nullptr) {
            Py_DECREF(current);
            return -1;
        }
        h::below = was->allocator;
        h::below_capsule = current;  // kept: arrays made under it need it to the end
    }
    PyObject* mine = PyCapsule_New(&h::handler, "mem_handler", nullptr);
    if (mine == nullptr) return -1;
    ArrayData* before = h::data;
    h::data = owner;
    PyObject* old = PyDataMem_SetHandler(mine);
    Py_DECREF(mine);
    if (old == nullptr) {
        h::data = before;
        return -1;
    }
    Py_DECREF(old);
    return 0;
}

}  // namespace mizu
