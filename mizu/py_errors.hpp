// Turns the core's C++ exceptions into the Python exceptions users expect.
// Used as Cython's `except +raise_py_error` handler, inside a catch block.
#pragma once

#include <Python.h>

#include <new>
#include <stdexcept>
#include <system_error>

#include "segment.hpp"

namespace mizu {

inline void raise_py_error() {
    try {
        throw;
    } catch (const OutOfSharedMemory& e) {
        PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const std::system_error& e) {
        // Raised as the instance OSError(errno, text) makes, of the errno's
        // subclass (ProcessLookupError for ESRCH): Cython's `except`
        // matches the type it is raised with, which it does not normalize.
        PyObject* error = PyObject_CallFunction(PyExc_OSError, "is", e.code().value(), e.what());
        if (error) {
            PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error)), error);
            Py_DECREF(error);
        }
    } catch (const std::invalid_argument& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::length_error& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::bad_alloc&) {
        PyErr_NoMemory();
    } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (...) {
        PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception in mizu's core");
    }
}

}  // namespace mizu
