"""Every pickle that mizu makes goes through `dumps` here.

Protocol 5, with three additions for arrays that numpy pickles as copies
of their items, in band, so that they too cross to another process out of
band (by reference from an arena block, a worker's writes reaching the
caller):
- an array whose data lies in an arena block but is neither C- nor
  Fortran-contiguous (a column of a C-ordered matrix, a strided slice)
  pickles as a view of the bytes it spans;
- a contiguous array of datetimes or timedeltas, as a view of its bytes;
- a numpy.recarray or numpy.matrix, as its plain array, viewed again.
A contiguous array of a builtin number type pickles as numpy pickles it,
its bytes out of band, only sooner (`_reduce_plain`).

An object may say, as it is pickled, how the arrays pickled after it in
the same value go (`share_arrays_after`): joblib's backend sends a loop's
large arrays once that way, and arrays that a numpy.memmap maps from a
file as mappings of that file (`file_mapping`).

Each thread reuses one pickler and its buffer, which saves building them for
every message.

A pool made with ``by_value`` pickles its tasks with a pickler that hands
cloudpickle the functions and classes that pickle would name but a worker
may not find by that name (lambdas, closures, those of ``__main__``), which
cloudpickle pickles by value; everything else, data above all, stays
pickle's. Its initializer, which multiprocessing pickles, travels wrapped in
`ByValue`.
"""

import copyreg
import functools
import io
import mmap
import os
import pickle
import sys
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

PROTOCOL = 5
BY_VALUE_VARIABLE = "MIZU_BY_VALUE"

_BIG = 1 << 20   # a buffer grown past this by one message is not kept for the next


def _view(buffer, dtype, shape, strides, offset):
    """The array an arena-backed strided view pickles to: a view of `buffer`, the bytes it spans."""
    import numpy
    return numpy.ndarray(shape, dtype, buffer=buffer, offset=offset, strides=strides)


def _from_buffer(buffer, typecode, shape, order):
    """A contiguous array of a builtin number type unpickled from its bytes, as numpy's own pickle rebuilds it."""
    import numpy
    return numpy.frombuffer(buffer, typecode).reshape(shape, order=order)


def _mapped(filename, mode, offset, dtype, shape, order, strides, nbytes, first):
    """An array whose bytes a file maps (file_mapping's reduction): a numpy.memmap, or a strided view of one."""
    import numpy
    if strides is None:
        return numpy.memmap(filename, dtype, mode, offset, shape, order)
    return _view(numpy.memmap(filename, numpy.uint8, mode, offset, (nbytes,)), dtype, shape, strides, first)


def memmap_under(array):
    """The numpy.memmap that maps array's bytes from its file (array itself, or one under its views), or None."""
    numpy = sys.modules["numpy"]
    owner = array
    # Views keep their array in .base, as as_strided's and sliding_window_view's helper object does; numpy
    # makes a view's base the array that owns its memory, so a few steps reach it (a bound: .base may be odd).
    for _ in range(16):
        if isinstance(owner, numpy.ndarray) and isinstance(owner.base, mmap.mmap):
            return owner if isinstance(owner, numpy.memmap) else None
        owner = getattr(owner, "base", None)
        if owner is None:
            return None
    return None


def file_mapping(array, owner=None):
    """A reduction of array by which the process that unpickles it maps its bytes from their file, or None.

    array is a numpy.memmap, or any array that views one (owner, which
    memmap_under finds if not given), over a file that it maps shared ("r",
    "r+" or "w+"). It arrives as a numpy.memmap (a strided view of one if
    it is neither C- nor Fortran-contiguous) over the same bytes of the
    file of the same name, read-only if the memmap was opened "r" or array
    is read-only: writes to it reach the file, and the sender sees them.
    The file is taken by its name: one put in its place since is the one
    mapped. None if array's memory is the process's own (a copy-on-write
    memmap's may differ from its file), if it is empty, if its memmap has
    no file name (one of an unnamed file object), if it spans bytes beyond
    its memmap (strides made by hand), or if its file is gone or shorter
    than it.
    """
    if owner is None:
        owner = memmap_under(array)
    if owner is None or owner.filename is None or owner.mode == "c" or array.size == 0:
        return None
    from mizu._arena import _span

    address = array.__array_interface__["data"][0]
    low, nbytes = _span(address, array.shape, array.strides, array.itemsize, False)
    start = owner.__array_interface__["data"][0]
    if low < start or low + nbytes > start + owner.nbytes:
        return None   # strides made by hand (as_strided) that reach beyond the memmap
    # The owner's first byte is the file's byte at its offset.
    offset = owner.offset + low - start
    try:
        if os.stat(owner.filename).st_size < offset + nbytes:
            return None
    except OSError:
        return None
    flags = array.flags
    mode = "r" if owner.mode == "r" or not flags.writeable else "r+"   # "w+" again would empty the file
    if flags.c_contiguous or flags.f_contiguous:
        return _mapped, (owner.filename, mode, offset, array.dtype, array.shape,
                         "C" if flags.c_contiguous else "F", None, nbytes, 0)
    return _mapped, (owner.filename, mode, offset, array.dtype, array.shape, "C", array.strides, nbytes,
                     address - low)


def _as_subclass(cls, func, args):
    """An array subclass's instance unpickled as a view of the plain array that (func, args) rebuilds."""
    return func(*args).view(cls)


def _reduce_subclass(array):
    """A numpy.recarray or numpy.matrix, whose state is its data's alone: pickled as its plain array is, then viewed.

    numpy pickles an instance of a subclass with its bytes in band: one in an
    arena block would reach a worker as a copy.
    """
    import numpy
    plain = _reduce_plain(array.view(numpy.ndarray))
    if len(plain) != 2:
        return array.__reduce_ex__(PROTOCOL)   # numpy's pickle with a state: its bytes are in band anyway
    return _as_subclass, (type(array), *plain)


def _reduce_plain(array):
    flags = array.flags
    contiguous = flags.c_contiguous or flags.f_contiguous
    dtype = array.dtype
    if contiguous and dtype.isbuiltin == 1 and dtype.kind in "biufc" and dtype.isnative and dtype.metadata is None:
        # What numpy's own pickle of it holds, made in half the time: the
        # dtype as its one-letter code, which names it exactly, where numpy
        # pickles a reduction of it, and no lookup of numpy's rebuilding
        # function in its modules at every array.
        return _from_buffer, (pickle.PickleBuffer(array), dtype.char, array.shape,
                              "C" if flags.c_contiguous else "F")
    if dtype.kind in "mM" and contiguous:
        # numpy pickles datetimes and timedeltas in band, since their items
        # have no buffer format: their bytes go as 64-bit integers, out of
        # band (by reference from an arena block) as any other array's.
        return _view, (pickle.PickleBuffer(array.view("i8")), array.dtype, array.shape, array.strides, 0)
    if not contiguous:
        from mizu._arena import arena_block
        found = arena_block(array)
        if found is not None:
            block, low, nbytes = found
            span = memoryview(block)[low:low + nbytes]
            if not flags.writeable:
                span = span.toreadonly()
            first = array.__array_interface__["data"][0] - block.address - low
            return _view, (pickle.PickleBuffer(span), array.dtype, array.shape, array.strides, first)
    return array.__reduce_ex__(PROTOCOL)


class _Pickler(pickle.Pickler):
    def __init__(self, file, dispatch):
        # Read by pickle.Pickler.__init__, so it must be set first.
        self.dispatch_table = dispatch
        self.buffer_callback = None
        self.busy = False
        self.sharing = _Sharing()
        super().__init__(file, PROTOCOL, buffer_callback=self._out_of_band)

    def _out_of_band(self, buffer):
        return True if self.buffer_callback is None else self.buffer_callback(buffer)


class _Sharing:
    """How the plain arrays and memmaps that a pickler meets from now on in its value go (share_arrays_after).

    The pickler's dispatch table holds its methods, which hold it and not
    the pickler: they add no reference cycle.
    """

    __slots__ = ("share",)

    def __init__(self):
        self.share = None

    def reduce_array(self, array):
        """A plain numpy array's reduction: _reduce_plain's of share(array), or share's own (a plain tuple)."""
        if self.share is not None:
            array = self.share(array)
            if type(array) is tuple:
                return array
        return _reduce_plain(array)

    def reduce_memmap(self, array):
        """A numpy.memmap's reduction: that of what share(array) gives (see reduce_array), or numpy's."""
        if self.share is not None:
            shared = self.share(array)
            if type(shared) is tuple:
                return shared
            if shared is not array:
                return _reduce_plain(shared)
        return array.__reduce_ex__(PROTOCOL)

    def reduce_sharing(self, sharer, obj):
        """The reduction of obj, an instance of a class given to share_arrays_after: its own, once sharer spoke."""
        self.share = sharer(obj)
        return obj.__reduce_ex__(PROTOCOL)


def _found(module, qualname):
    """The object at qualname (dotted) in module, or None."""
    found = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            return None
    return found


def _module_and_name(obj):
    """(module name, qualified name) by which obj (a function or class) is found in this process, or None."""
    module_name, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str) or "<locals>" in qualname:
        return None
    module = sys.modules.get(module_name)
    return (module_name, qualname) if module is not None and _found(module, qualname) is obj else None


def named(obj):
    """Whether pickle's name of obj (a function or class) finds it, here and in a worker: outside __main__."""
    where = _module_and_name(obj)
    return where is not None and where[0] != "__main__"


def _from_main_or_value(qualname, payload, arrays):
    """In a worker: the main module's object of that name, as pickle would find it, else cloudpickle's payload's.

    A worker whose main module is the program's (fork, or spawn and
    forkserver re-running a script) shares that module's globals with its
    other functions and its initializer, as without by_value; one that has
    none (``python -c``, a notebook) gets the object cloudpickle made, with
    `arrays` in the places they were taken from (_by_value_loads).
    """
    found = _found(sys.modules.get("__main__"), qualname)
    if found is not None:
        return found
    return _by_value_loads(payload, arrays)


class _ArraysBack(pickle.Unpickler):
    """Unpickles a payload of _cloudpickled, with its arrays back in their places."""

    def __init__(self, payload, arrays):
        super().__init__(io.BytesIO(payload))
        self.arrays = arrays

    def persistent_load(self, pid):
        return self.arrays[pid]


def _by_value_loads(payload, arrays):
    """The object cloudpickle pickled as payload, with `arrays` where it held the arrays taken apart."""
    if not arrays:
        return pickle.loads(payload)
    return _ArraysBack(payload, arrays).load()


def _array_apart(pickler, value):
    """_ArraysApart's persistent_id: where an array goes in pickler.arrays, or None for what stays in the payload.

    Plain arrays and memmaps, of any item type but objects, that lie in an
    arena block or would not travel inside a message (mizu._messages.INLINE
    bytes or more) go apart; small ones stay, pickled once with the rest.
    """
    kind = type(value)
    if ((kind is pickler.ndarray or kind is pickler.memmap) and not value.dtype.hasobject
            and (value.nbytes >= pickler.inline or pickler.arena_block(value) is not None)):
        pickler.arrays.append(value)
        return len(pickler.arrays) - 1
    return None


# cloudpickle's Pickler with _array_apart, made on first use (cloudpickle is imported only then).
_ArraysApart = None


def _cloudpickled(obj):
    """cloudpickle's pickle of obj without the numpy arrays it holds, and those arrays (a tuple).

    The arrays (_array_apart's) are left for the pickler of the message to
    pickle, as it pickles the task's own: an arena array by reference, a
    large one out of band, one of a joblib loop once for the loop.
    """
    import cloudpickle  # type: ignore[import-untyped, import-not-found, unused-ignore]

    numpy = sys.modules.get("numpy")
    if numpy is None:
        return cloudpickle.dumps(obj, protocol=PROTOCOL), ()
    global _ArraysApart
    if _ArraysApart is None:
        _ArraysApart = type("_ArraysApart", (cloudpickle.Pickler,), {"persistent_id": _array_apart})
    from mizu._arena import arena_block
    from mizu._messages import INLINE

    file = io.BytesIO()
    pickler = _ArraysApart(file, protocol=PROTOCOL)
    pickler.ndarray, pickler.memmap, pickler.arrays = numpy.ndarray, numpy.memmap, []
    pickler.arena_block, pickler.inline = arena_block, INLINE
    pickler.dump(obj)
    return file.getvalue(), tuple(pickler.arrays)


# A function or class -> its cloudpickle and the arrays taken apart from it, made the first time.
_payloads: "weakref.WeakKeyDictionary[object, tuple[bytes, tuple[Any, ...]]]" = weakref.WeakKeyDictionary()


def by_value_reduction(obj):
    """How obj, a function or class that a worker may not find by name, is pickled: by cloudpickle.

    cloudpickle's pickle of an object is made once and kept while the
    object lives: a graph's function inside the arguments of each of its
    tasks costs one pickle, and, as for a task's callable, what it captures
    is what it held when first sent; but the numpy arrays taken apart
    (_cloudpickled), the same arrays, go with the items they hold at each
    message.
    """
    try:
        made = _payloads.get(obj)
    except TypeError:   # not weakly referenceable, or unhashable
        made = None
    if made is None:
        made = _cloudpickled(obj)
        try:
            _payloads[obj] = made
        except TypeError:
            pass
    payload, arrays = made
    where = _module_and_name(obj)
    if where is not None and where[0] == "__main__":
        return _from_main_or_value, (where[1], payload, arrays)
    return _by_value_loads, (payload, arrays)


class _ByValuePickler(_Pickler):
    """_Pickler, with functions and classes that a worker may not find by name pickled by cloudpickle.

    pickle calls reducer_override for every object but None, bools and
    exact ints, floats, str, bytes, lists, tuples, dicts and sets, so data
    of those types pays nothing for it.
    """

    def reducer_override(self, obj):
        kind = type(obj)
        if (kind is types.FunctionType or issubclass(kind, type)) and not named(obj):
            return by_value_reduction(obj)
        return NotImplemented


_local = threading.local()
_sharers: dict[type, Callable[[Any], Any]] = {}   # a class: its sharer (share_arrays_after)
_sharers_named = 0   # how many times share_arrays_after was called: a pickler made before is made again


def share_arrays_after(cls, sharer):
    """Have each instance of cls, as mizu pickles it, say how the numpy arrays pickled after it go.

    sharer(obj) returns None, or share: a function that takes a plain
    numpy array or a numpy.memmap and returns it, or a plain array of the
    same items to send in its place (a copy in shared memory that many
    messages reuse), or a reduction (a tuple) to pickle it by, such as
    `file_mapping`'s. The arrays that the value being pickled holds
    anywhere after obj, in any container or object that pickles its
    arrays, then go as share(array); those of the next value go their own
    way again. obj itself pickles by its ``__reduce_ex__``.
    """
    global _sharers_named
    _sharers[cls] = sharer
    _sharers_named += 1


def _dispatch_key():
    # The table copies copyreg's; it is made again when that changes, when
    # numpy (and so the array reducer) appears, or when a sharer is named.
    return "numpy" in sys.modules, len(copyreg.dispatch_table), _sharers_named


def _new_pickler(key):
    dispatch = dict(copyreg.dispatch_table)
    file = io.BytesIO()
    pickler = (_ByValuePickler if key[-1] else _Pickler)(file, dispatch)
    if key[0]:
        numpy = sys.modules["numpy"]
        dispatch[numpy.ndarray] = pickler.sharing.reduce_array
        dispatch[numpy.recarray] = dispatch[numpy.matrix] = _reduce_subclass
        dispatch.setdefault(numpy.memmap, pickler.sharing.reduce_memmap)
    for cls, sharer in list(_sharers.items()):
        dispatch[cls] = functools.partial(pickler.sharing.reduce_sharing, sharer)
    return pickler, file, key


def dumps(obj, buffer_callback=None, by_value=False):
    """dumps(obj, buffer_callback=None, by_value=False)

    `pickle.dumps(obj, 5, buffer_callback=buffer_callback)`, with arena-backed
    strided arrays pickled as views (see the module's docstring), and with
    by_value, functions and classes that a worker may not find by name
    pickled by cloudpickle.

    Raises
    ------
    Exception
        Whatever pickling `obj` raises.
    """
    key = (*_dispatch_key(), bool(by_value))
    name = "by_value" if by_value else "pickler"
    cached = getattr(_local, name, None)
    if cached is None or cached[2] != key:
        cached = _new_pickler(key)
        setattr(_local, name, cached)
    pickler, file, _ = cached
    if pickler.busy:
        # Pickling obj pickles something else in this thread (a __reduce__
        # that submits a task): that one gets a pickler of its own.
        cached = _new_pickler(key)
        pickler, file, _ = cached
    pickler.busy = True
    pickler.buffer_callback = buffer_callback
    try:
        pickler.dump(obj)
        return file.getvalue()
    finally:
        pickler.sharing.share = None
        pickler.clear_memo()
        pickler.buffer_callback = None
        pickler.busy = False
        if file.tell() > _BIG:
            if getattr(_local, name, None) is cached:
                setattr(_local, name, None)
        else:
            file.seek(0)
            file.truncate()


loads = pickle.loads


def _identity(value):
    return value


class ByValue:
    """ByValue(fn)

    Pickles as cloudpickle's pickle of fn, and unpickles as fn itself;
    unpickled or not (a forked worker inherits its initializer), calling it
    calls fn.
    """

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __reduce__(self):
        return by_value_reduction(self.fn) if not named(self.fn) else (_identity, (self.fn,))


def by_value(choice):
    """Whether a pool pickles its callables by value: choice (a bool), or if None the MIZU_BY_VALUE variable's.

    Raises
    ------
    TypeError
        choice is neither a bool nor None.
    ValueError
        The variable is set to something other than 0, 1, false or true.
    ImportError
        Pickling by value is asked for and cloudpickle is not installed.
    """
    if choice is None:
        text = os.environ.get(BY_VALUE_VARIABLE, "").strip().lower()
        if text not in ("", "0", "1", "false", "true"):
            raise ValueError(f"{BY_VALUE_VARIABLE} must be 0, 1, false or true, not {os.environ[BY_VALUE_VARIABLE]!r}")
        choice = text in ("1", "true")
    elif not isinstance(choice, bool):
        raise TypeError(f"by_value must be True, False or None, not {type(choice).__name__}")
    if choice:
        try:
            import cloudpickle  # type: ignore[import-untyped, import-not-found, unused-ignore]  # noqa: F401
        except ImportError as exc:
            raise ImportError("pickling callables by value (by_value=True, or MIZU_BY_VALUE=1) needs cloudpickle: "
                              "pip install cloudpickle") from exc
    return choice
