# cython: binding=False, always_allow_keywords=False
"""Values to and from the wire format of ``doc/dev/wire.rst``.

The common small shapes (None, bool, int64, float, str, bytes, tuple, list,
dict with str keys, numeric numpy arrays) are encoded in C by the C++
``Writer``; anything else, subclasses included, travels as a pickle
(protocol 5) inside the message, so it comes back as itself. Decoding walks
the C++ ``Reader``, which checks every byte it reads.
"""

cimport cython
from cpython.buffer cimport (PyBUF_RECORDS, PyBUF_RECORDS_RO, PyBUF_SIMPLE, PyBuffer_IsContiguous,
                            PyBuffer_Release, PyObject_GetBuffer)
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_Next, PyDict_SetItem
from cpython.exc cimport PyErr_Clear, PyErr_ExceptionMatches
from cpython.float cimport PyFloat_FromDouble
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_FromLongLong
from cpython.ref cimport Py_INCREF, PyObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport UINT32_MAX, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from mizu.includes.wire cimport (
    ArrayHeader, FrameHeader, PickleBlob, Reader, Span, Storage, Tag, Typed, Writer, kMaxDepth, kMaxDims,
    typed_parts,
)

import sys

from mizu._pickler import dumps as _pickle, loads as _loads

__all__ = ["encode", "decode"]

cdef extern from "Python.h":
    # Declared without an exception value: a str with lone surrogates has no
    # UTF-8 form and goes to pickle instead.
    const char* _utf8_or_null "PyUnicode_AsUTF8AndSize"(object s, Py_ssize_t* size)
    long long PyLong_AsLongLongAndOverflow(object o, int* overflow) except? -1
    double PyFloat_AS_DOUBLE(object o)
    object PyMemoryView_FromMemory(char* mem, Py_ssize_t size, int flags)
    int PyBUF_READ

cdef char _native_order = ord("<") if sys.byteorder == "little" else ord(">")
cdef dict _dtypes = {}

# Array kinds and itemsizes sent as themselves: the fixed-size numbers every
# worker language can take.
cdef frozenset _plain_kinds = frozenset([
    ("b", 1), ("i", 1), ("i", 2), ("i", 4), ("i", 8), ("u", 1), ("u", 2), ("u", 4), ("u", 8),
    ("f", 2), ("f", 4), ("f", 8), ("c", 8), ("c", 16),
])

# Arrays of fewer bytes travel inside a peer's message, copied.
cdef Py_ssize_t _INLINE = 4096

# numpy is imported by whoever made an array, never here: a process whose
# values hold no array does not load it.
cdef type _ndarray = None


cdef inline bint _is_ndarray(type t):
    global _ndarray
    if _ndarray is None:
        numpy = sys.modules.get("numpy")
        if numpy is None:
            return False
        _ndarray = numpy.ndarray
    return t is _ndarray


def encode(obj):
    """encode(obj)

    Encode a value as one wire message.

    Parameters
    ----------
    obj : object
        Any picklable value. None, bool, int in the int64 range, float, str,
        bytes, tuple, list, dict with str keys and numpy arrays of bool,
        integer, floating or complex dtypes are encoded natively; anything
        else (subclasses of those types too) as a pickle.

    Returns
    -------
    bytes
        The message; its first byte is 0x57.

    Raises
    ------
    pickle.PicklingError, TypeError, RecursionError
        As `pickle.dumps` raises for a part that must be pickled and cannot
        be; a value nesting more than 64 containers deep (or holding itself)
        is pickled whole.
    RuntimeError
        A list or dict changed size while it was being encoded.
    """
    cdef Writer w
    w.begin_message()
    if _put(w, obj, 0):
        w.truncate(2)
        _put_pickle(w, obj)
    return PyBytes_FromStringAndSize(w.data(), w.size())


cpdef object encode_plain(object obj):
    """encode_plain(obj)

    Encode a value made only of natively encoded parts, without pickle.

    Like `encode`, for values whose every part is None, bool, an int in the
    int64 range, float, str, bytes, tuple, list or dict with str keys (exact
    types), and no list or dict is reached twice (pickle keeps such sharing,
    a wire message would not). Arrays are left to pickle's out-of-band path.

    Returns
    -------
    bytes or None
        The message, or None if some part is of another type or the value
        nests too deep.
    """
    cdef Writer w
    if encode_plain_into(w, NULL, 0, obj):
        return None
    return PyBytes_FromStringAndSize(w.data(), w.size())


cdef int encode_plain_into(Writer& w, const void* header, Py_ssize_t n, object obj) except -1:
    """Write the n bytes at header, then encode_plain(obj), into the empty w; nonzero where encode_plain gives None."""
    cdef Plain plain
    plain.count = 0
    if n:
        memcpy(w.put_header(n), header, n)
    w.begin_message()
    return _put(w, obj, 0, &plain)


cpdef object decode(object data, object buffers=None):
    """decode(data, buffers=None)

    Decode one wire message.

    Parameters
    ----------
    data : bytes or buffer
        A whole message, as `encode` returns it.
    buffers : sequence of buffers, optional
        The out-of-band buffers of the envelope that carried the message
        (doc/dev/messages.rst), which its arena arrays name by index.

    Returns
    -------
    object
        The value. Inline arrays are new, writable copies; arena arrays are
        views of their buffers; masked arrays are `numpy.ma.MaskedArray`;
        data frames are `pandas.DataFrame`.

    Raises
    ------
    ValueError
        The message is malformed (the text names the byte offset), holds a
        pickle that does not load (the pickle's error is the cause), a data
        frame or typed vector that pandas cannot make (or a data frame
        without pandas installed), or an arena array that names no buffer,
        or more bytes than its buffer holds.
    """
    cdef Py_buffer view
    if PyBytes_CheckExact(data):
        return _decode(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), buffers)
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return _decode(<const char*>view.buf, view.len, buffers)
    finally:
        PyBuffer_Release(&view)


# Values for a worker in another language (an R worker): no pickle, and
# arrays in the arena, named by index in `placements` for the envelope's
# out-of-band buffer records (doc/dev/messages.rst).
@cython.final
cdef class Peer:
    cdef readonly str language
    cdef readonly list placements   # (block, offset, nbytes) per arena array, in index order

    def __cinit__(self, str language):
        self.language = language
        self.placements = []

    cdef int refuse(self, object obj) except -1:
        raise TypeError(f"a value of type {type(obj).__module__}.{type(obj).__qualname__} has no form in "
                        f"{self.language}: send None, bool, int (64-bit), float, complex, str, bytes, lists, "
                        f"tuples, dicts with str keys and numeric numpy arrays")

    cdef int put_other(self, Writer& w, object obj, int depth) except -1:
        cdef type t = type(obj)
        numpy = sys.modules.get("numpy")
        if t is complex or (numpy is not None and isinstance(obj, numpy.complexfloating)):
            import numpy
            return self.put_array(w, numpy.array(obj, numpy.complex128))
        if numpy is not None and isinstance(obj, numpy.generic) and not isinstance(obj, numpy.void):
            return _put(w, obj.item(), depth, NULL, self)
        if _is_ndarray(t):
            return self.put_array(w, obj)
        ma = sys.modules.get("numpy.ma")
        if ma is not None and t is ma.MaskedArray:
            w.begin_masked()
            self.put_array(w, obj.filled(0))
            return self.put_array(w, ma.getmaskarray(obj))
        pandas = sys.modules.get("pandas")
        if pandas is not None and isinstance(obj, pandas.DataFrame):
            return self.put_frame(w, obj, depth)
        if pandas is not None and isinstance(obj, pandas.Series):
            if depth >= kMaxDepth - 2:
                raise ValueError(f"a Series nested more than {kMaxDepth - 2} containers deep has no form in "
                                 f"{self.language}")
            from mizu._r.frames import column_part
            return self.put_part(w, column_part(obj), depth)
        return self.refuse(obj)

    cdef int put_frame(self, Writer& w, object df, int depth) except -1:
        cdef const char* text
        cdef Py_ssize_t n
        if depth >= kMaxDepth - 2:
            raise ValueError(f"a DataFrame nested more than {kMaxDepth - 2} containers deep has no form in "
                             f"{self.language}")
        from mizu._r.frames import frame_parts
        nrows, row_names, columns = frame_parts(df)
        if len(columns) > UINT32_MAX:
            raise ValueError(f"a DataFrame of {len(columns)} columns exceeds the wire's 2^32 - 1")
        w.begin_frame(<uint32_t>len(columns), <uint64_t>nrows)
        if row_names is None:
            w.put_none()
        else:
            self.put_part(w, row_names, depth + 1)
        for name, part in columns:
            text = _utf8(name, &n)
            if text == NULL:
                raise ValueError(f"the column name {name!r} holds lone surrogates, which have no UTF-8 form")
            w.put_key(text, n)
            self.put_part(w, part, depth + 1)
        return 0

    cdef int put_part(self, Writer& w, tuple part, int depth) except -1:
        """A part as mizu._r.frames describes it: an array, a masked array or a typed vector."""
        form = part[0]
        if form == "a":
            return self.put_array(w, part[1])
        if form == "M":
            w.begin_masked()
            self.put_array(w, part[1])
            return self.put_array(w, part[2])
        w.begin_typed(<Typed>ord(part[1]))
        for item in part[2]:
            if _put(w, item, depth + 1, NULL, self):
                raise ValueError(f"a typed vector's part nests too deep for {self.language}")
        return 0

    cdef int put_array(self, Writer& w, object a) except -1:
        """An array in the arena when it lies there already or is large (copied once), else inline."""
        cdef ArrayHeader h
        cdef int k
        dtype = a.dtype
        if dtype.fields is not None or (dtype.kind, dtype.itemsize) not in _plain_kinds or a.ndim > kMaxDims:
            raise TypeError(f"a numpy array of dtype {dtype} has no form in {self.language}: send bool, integer, "
                            f"floating or complex arrays")
        found = None
        if all(stride >= 0 for stride in a.strides):
            from mizu._arena import arena_block
            found = arena_block(a)
        if found is None:
            if a.nbytes < _INLINE:
                if not _put_array(w, a):
                    raise AssertionError("a plain array that _put_array refused")
                return 0
            from mizu._arena import default_arena
            import numpy
            fortran = a.flags.f_contiguous and not a.flags.c_contiguous
            block = default_arena().alloc(a.nbytes)
            copy = numpy.ndarray(a.shape, dtype, buffer=block, order="F" if fortran else "C")
            numpy.copyto(copy, a)
            a, found = copy, (block, 0, a.nbytes)
        h.storage = Storage.arena
        h.buffer = len(self.placements)
        self.placements.append(found)
        _array_type(h, dtype)
        h.ndim = a.ndim
        for k in range(a.ndim):
            h.shape[k] = a.shape[k]
            h.strides[k] = a.strides[k]
        w.put_array(h)
        return 0


def encode_for_peer(obj, str language):
    """encode_for_peer(obj, language)

    Encode a value for a worker in another language: as `encode`, but with no
    pickle, and arrays that lie in an arena block, or of 4 KiB or more, as
    arena arrays (any other is copied into a block of the default arena).

    Returns
    -------
    (bytes, list of (mizu._arena.Block, int, int))
        The message, and the (block, offset, bytes) of each out-of-band
        buffer its arena arrays name, in index order.

    Raises
    ------
    TypeError
        A part has no form in `language`, which the message names.
    ValueError
        The value nests deeper than the wire allows, or holds itself.
    """
    cdef Writer w
    placements = encode_peer_into(w, NULL, 0, obj, language)
    return PyBytes_FromStringAndSize(w.data(), w.size()), placements


cdef list encode_peer_into(Writer& w, const void* header, Py_ssize_t n, object obj, str language):
    """Write the n bytes at header, then obj as encode_for_peer encodes it, into the empty w; its placements."""
    cdef Peer peer = Peer.__new__(Peer, language)
    if n:
        memcpy(w.put_header(n), header, n)
    w.begin_message()
    if _put(w, obj, 0, NULL, peer):
        raise ValueError(f"a value nested more than {kMaxDepth} containers deep, or holding itself, has no form in "
                         f"{language}")
    return peer.placements


# The lists and dicts a plain encoding has visited: one reached twice makes
# the value no tree, which only pickle keeps as it is.
cdef struct Plain:
    int count
    void* seen[16]


cdef bint _first_visit(Plain* plain, object obj) noexcept:
    cdef int i
    for i in range(plain.count):
        if plain.seen[i] == <void*>obj:
            return False
    if plain.count == 16:
        return False
    plain.seen[plain.count] = <void*>obj
    plain.count += 1
    return True


# Returns 1, having written part of obj, when obj nests containers deeper than
# kMaxDepth; the caller then pickles the whole value. With plain, returns 2
# instead of writing any part that would be pickled, an array, or a list or
# dict reached a second time.
cdef int _put(Writer& w, object obj, int depth, Plain* plain=NULL, Peer peer=None) except -1:
    cdef type t = type(obj)
    cdef int overflow, status
    cdef long long number
    cdef Py_ssize_t n, i
    cdef const char* text
    if t is int:
        number = PyLong_AsLongLongAndOverflow(obj, &overflow)
        if not overflow:
            w.put_int64(number)
            return 0
    elif t is float:
        w.put_float64(PyFloat_AS_DOUBLE(obj))
        return 0
    elif t is tuple:
        if depth == kMaxDepth:
            return 1
        n = PyTuple_GET_SIZE(obj)
        if n <= UINT32_MAX:
            w.begin_tuple(<uint32_t>n)
            for i in range(n):
                status = _put(w, <object>PyTuple_GET_ITEM(obj, i), depth + 1, plain, peer)
                if status:
                    return status
            return 0
    elif obj is None:
        w.put_none()
        return 0
    elif t is bool:
        w.put_bool(obj is True)
        return 0
    elif t is str:
        text = _utf8(obj, &n)
        if text != NULL:
            w.put_str(text, n)
            return 0
    elif t is bytes:
        w.put_bytes(PyBytes_AS_STRING(obj), PyBytes_GET_SIZE(obj))
        return 0
    elif t is list:
        if depth == kMaxDepth:
            return 1
        if plain and not _first_visit(plain, obj):
            return 2
        if PyList_GET_SIZE(obj) <= UINT32_MAX:
            return _put_list(w, obj, depth, plain, peer)
    elif t is dict:
        if depth == kMaxDepth:
            return 1
        if plain and not _first_visit(plain, obj):
            return 2
        if len(<dict>obj) <= UINT32_MAX:
            return _put_dict(w, obj, depth, plain, peer)
    elif peer is not None:
        return peer.put_other(w, obj, depth)
    elif not plain and _is_ndarray(t):
        if _put_array(w, obj):
            return 0

    if plain:
        return 2
    if peer is not None:
        peer.refuse(obj)
    _put_pickle(w, obj)
    return 0


# The UTF-8 form of s, or NULL with no exception set if s holds lone
# surrogates, which have none.
cdef const char* _utf8(object s, Py_ssize_t* n) except? NULL:
    cdef const char* text = _utf8_or_null(s, n)
    if text == NULL and PyErr_ExceptionMatches(UnicodeEncodeError):
        PyErr_Clear()
    return text


cdef int _put_list(Writer& w, list obj, int depth, Plain* plain, Peer peer) except -1:
    cdef Py_ssize_t n = PyList_GET_SIZE(obj), i
    cdef int status
    w.begin_list(<uint32_t>n)
    for i in range(n):
        # Pickling an item runs arbitrary code, which may change the list.
        if i >= PyList_GET_SIZE(obj):
            raise RuntimeError("list changed size during encoding")
        status = _put(w, <object>PyList_GET_ITEM(obj, i), depth + 1, plain, peer)
        if status:
            return status
    if PyList_GET_SIZE(obj) != n:
        raise RuntimeError("list changed size during encoding")
    return 0


# A dict with a key that is not an exact, encodable str is pickled whole.
cdef int _put_dict(Writer& w, dict obj, int depth, Plain* plain, Peer peer) except -1:
    cdef Py_ssize_t n = len(obj), pos = 0, seen = 0, size
    cdef int status
    cdef size_t start = w.size()
    cdef PyObject* key
    cdef PyObject* value
    cdef const char* text
    w.begin_dict(<uint32_t>n)
    while PyDict_Next(obj, &pos, &key, &value):
        text = NULL
        if type(<object>key) is str:
            text = _utf8(<object>key, &size)
        if text == NULL:
            if plain:
                return 2
            if peer is not None:
                raise TypeError(f"a dict with the key {<object>key!r} has no form in {peer.language}, which "
                                f"takes dicts whose keys are all str")
            w.truncate(start)
            _put_pickle(w, obj)
            return 0
        w.put_key(text, size)
        status = _put(w, <object>value, depth + 1, plain, peer)
        if status:
            return status
        seen += 1
    if seen != n or len(obj) != n:
        raise RuntimeError("dictionary changed size during encoding")
    return 0


# Writes a plain numeric array and returns True, or returns False for any
# other array.
cdef bint _put_array(Writer& w, object a) except -1:
    dtype = a.dtype
    cdef ArrayHeader h
    cdef Py_buffer view
    cdef int i, k, ndim
    cdef int64_t stride
    cdef bint fortran
    if dtype.fields is not None or (dtype.kind, dtype.itemsize) not in _plain_kinds or a.ndim > kMaxDims:
        return False
    PyObject_GetBuffer(a, &view, PyBUF_RECORDS_RO)
    try:
        fortran = PyBuffer_IsContiguous(&view, b"F") and not PyBuffer_IsContiguous(&view, b"C")
        if not fortran and not PyBuffer_IsContiguous(&view, b"C"):
            PyBuffer_Release(&view)
            a = a.copy(order="C")
            PyObject_GetBuffer(a, &view, PyBUF_RECORDS_RO)
        ndim = view.ndim
        _array_type(h, dtype)
        h.ndim = ndim
        stride = h.itemsize
        for i in range(ndim):
            k = i if fortran else ndim - 1 - i
            h.shape[k] = view.shape[k]
            h.strides[k] = stride
            stride *= h.shape[k]
        h.storage = Storage.inline_data
        h.data.data = <const char*>view.buf
        h.data.size = view.len
        w.put_array(h)
    finally:
        PyBuffer_Release(&view)
    return True


cdef int _array_type(ArrayHeader& h, object dtype) except -1:
    """The typestr and itemsize of a plain dtype, as numpy's dtype.str spells them."""
    h.itemsize = <uint32_t>dtype.itemsize
    if h.itemsize == 1:
        h.typestr[0] = ord("|")
    elif dtype.byteorder == "=":
        h.typestr[0] = _native_order
    else:
        h.typestr[0] = ord(dtype.byteorder)
    h.typestr[1] = ord(dtype.kind)
    if h.itemsize < 10:
        h.typestr[2] = ord("0") + h.itemsize
        h.typestr[3] = 0
    else:
        h.typestr[2] = ord("1")
        h.typestr[3] = ord("0") + h.itemsize - 10
        h.typestr[4] = 0
    return 0


cdef int _put_pickle(Writer& w, object obj) except -1:
    cdef bytes data = _pickle(obj)
    w.put_pickle(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    return 0


cdef object decode_at(const char* data, Py_ssize_t size, object buffers):
    """`decode` of the size bytes at data, which the caller keeps alive."""
    return _decode(data, size, buffers)


@cython.cpp_locals(True)
cdef object _decode(const char* data, Py_ssize_t size, object buffers):
    cdef Reader r = Reader(data, size)
    value = _value(r, buffers)
    r.finish()
    return value


# Numbers, the commonest items, are read here, inlined into the loops over
# items; everything else in _other_value.
cdef inline object _value(Reader& r, object buffers):
    cdef Tag t = r.tag()
    if t == Tag.int64:
        return PyLong_FromLongLong(r.int64())
    if t == Tag.float64:
        return PyFloat_FromDouble(r.float64())
    return _other_value(r, t, buffers)


cdef object _other_value(Reader& r, Tag t, object buffers):
    cdef Span s
    cdef uint32_t n, i
    if t == Tag.tuple:
        return _sequence(r, True, buffers)
    if t == Tag.none:
        return None
    if t == Tag.true_:
        return True
    if t == Tag.false_:
        return False
    if t == Tag.str:
        s = r.str()
        return PyUnicode_DecodeUTF8(s.data, <Py_ssize_t>s.size, NULL)
    if t == Tag.bytes:
        s = r.bytes()
        return PyBytes_FromStringAndSize(s.data, <Py_ssize_t>s.size)
    if t == Tag.list:
        return _sequence(r, False, buffers)
    if t == Tag.dict:
        n = r.begin(t)
        result = {}
        for i in range(n):
            s = r.key()
            key = PyUnicode_DecodeUTF8(s.data, <Py_ssize_t>s.size, NULL)
            PyDict_SetItem(result, key, _value(r, buffers))
        r.end()
        return result
    if t == Tag.ndarray:
        return _array(r, buffers)
    if t == Tag.masked:
        return _masked(r, buffers)
    if t == Tag.pickle:
        return _pickled(r)
    if t == Tag.typed:
        return _typed(r, buffers)
    return _frame(r, buffers)


cdef object _typed(Reader& r, object buffers):
    cdef size_t at = r.offset() - 1
    cdef Typed kind = r.begin_typed()
    cdef uint32_t i
    items = [_value(r, buffers) for i in range(typed_parts(kind))]
    r.end()
    try:
        from mizu._r.frames import typed_from_wire
        return typed_from_wire(chr(<uint8_t>kind), items)
    except ImportError as exc:
        raise ValueError(f"wire message at byte {at}: a typed vector, which needs pandas: pip install pandas") from exc
    except Exception as exc:
        raise ValueError(f"wire message at byte {at}: a typed vector of kind {chr(<uint8_t>kind)!r} ({exc})") from exc


cdef object _frame(Reader& r, object buffers):
    cdef size_t at = r.offset() - 1
    cdef FrameHeader f = r.begin_frame()
    cdef uint32_t i
    cdef Span s
    row_names = _value(r, buffers)
    names, columns = [], []
    for i in range(f.ncols):
        s = r.key()
        names.append(PyUnicode_DecodeUTF8(s.data, <Py_ssize_t>s.size, NULL))
        columns.append(_value(r, buffers))
    r.end()
    try:
        from mizu._r.frames import frame_from_wire
        return frame_from_wire(f.nrows, row_names, names, columns)
    except ImportError as exc:
        raise ValueError(f"wire message at byte {at}: a data frame, which needs pandas: pip install pandas") from exc
    except Exception as exc:
        raise ValueError(f"wire message at byte {at}: a data frame ({exc})") from exc


cdef object _sequence(Reader& r, bint is_tuple, object buffers):
    cdef uint32_t n = r.begin(Tag.tuple if is_tuple else Tag.list), i
    result = PyTuple_New(n) if is_tuple else PyList_New(n)
    for i in range(n):
        item = _value(r, buffers)
        # Both SET_ITEMs steal the reference.
        Py_INCREF(item)
        if is_tuple:
            PyTuple_SET_ITEM(result, i, item)
        else:
            PyList_SET_ITEM(result, i, item)
    r.end()
    return result


cdef object _array(Reader& r, object buffers):
    cdef size_t at = r.offset() - 1
    cdef ArrayHeader h
    r.array(h)
    return _array_of(h, at, buffers)


cdef object _masked(Reader& r, object buffers):
    cdef size_t at = r.offset() - 1
    cdef ArrayHeader values, mask
    r.masked(values, mask)
    import numpy
    return numpy.ma.MaskedArray(_array_of(values, at, buffers), mask=_array_of(mask, at, buffers))


cdef object _array_of(ArrayHeader& h, size_t at, object buffers):
    cdef Py_buffer view
    cdef uint32_t k
    cdef int64_t stride
    cdef bint c_order = True, f_order = True
    typestr = h.typestr.decode("ascii")
    import numpy
    dtype = _dtypes.get(typestr)
    if dtype is None:
        dtype = _dtypes[typestr] = numpy.dtype(typestr)
    shape = tuple([h.shape[k] for k in range(h.ndim)])
    if h.storage == Storage.arena:
        return _arena_array(h, at, buffers, dtype, shape)
    stride = h.itemsize
    for k in range(h.ndim):
        f_order = f_order and (h.shape[k] == 1 or h.strides[k] == stride)
        stride *= h.shape[k]
    stride = h.itemsize
    for k in reversed(range(h.ndim)):
        c_order = c_order and (h.shape[k] == 1 or h.strides[k] == stride)
        stride *= h.shape[k]
    try:
        if c_order or f_order or h.data.size == 0:
            out = numpy.empty(shape, dtype, order="C" if c_order else "F")
            PyObject_GetBuffer(out, &view, PyBUF_RECORDS)
            memcpy(view.buf, h.data.data, h.data.size)
            PyBuffer_Release(&view)
        else:
            inline = PyBytes_FromStringAndSize(h.data.data, <Py_ssize_t>h.data.size)
            strides = tuple([h.strides[k] for k in range(h.ndim)])
            out = numpy.ndarray(shape, dtype, buffer=inline, strides=strides).copy()
    except ValueError as exc:
        # An empty array may have a dimension numpy cannot index.
        raise ValueError(f"wire message at byte {at}: numpy cannot make an array of shape {shape} ({exc})") from exc
    if h.typestr[1] == ord("b"):
        # Any nonzero byte is true; numpy's bools must be exactly 0 or 1.
        numpy.minimum(out.view(numpy.uint8), 1, out=out.view(numpy.uint8))
    return out


cdef object _arena_array(ArrayHeader& h, size_t at, object buffers, object dtype, tuple shape):
    """A view of the out-of-band buffer an arena array names."""
    if buffers is None or h.buffer >= len(buffers):
        raise ValueError(f"wire message at byte {at}: an array in out-of-band buffer {h.buffer}, of "
                         f"{0 if buffers is None else len(buffers)} the message came with")
    buffer = buffers[h.buffer]
    if h.extent > len(memoryview(buffer).cast("B")):
        raise ValueError(f"wire message at byte {at}: an array of {h.extent} bytes in a buffer of "
                         f"{len(memoryview(buffer).cast('B'))}")
    import numpy
    strides = tuple([h.strides[k] for k in range(h.ndim)])
    out = numpy.ndarray(shape, dtype, buffer=buffer, strides=strides)
    if h.typestr[1] == ord("b"):
        numpy.minimum(out.view(numpy.uint8), 1, out=out.view(numpy.uint8))
    return out


cdef object _pickled(Reader& r):
    cdef size_t at = r.offset() - 1
    cdef PickleBlob blob = r.pickle()
    view = PyMemoryView_FromMemory(<char*>blob.data.data, <Py_ssize_t>blob.data.size, PyBUF_READ)
    try:
        return _loads(view)
    except Exception as exc:
        raise ValueError(f"wire message at byte {at}: the pickle value does not load ({exc!r})") from exc
    finally:
        view.release()
