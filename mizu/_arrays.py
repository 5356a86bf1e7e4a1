"""numpy arrays whose data lives in shared memory.

The creation functions mirror numpy's and return plain `numpy.ndarray`
objects whose ``.base`` is a `mizu._arena.Block` of this process's default
arena, so the array reaches other processes by reference instead of by copy.
`arena_block` finds the block behind any view of such an array.
"""

import operator

import numpy as np

from mizu._arena import _walk_to_block, arena_block, default_arena

__all__ = ["arena_block", "asarray", "default_arena", "empty", "empty_like", "full", "zeros", "zeros_like"]


def _check_numpy_only(function, like=None, device=None):
    if like is not None:
        raise TypeError(f"mizu.{function} does not take like=: it always makes a numpy.ndarray in shared memory")
    if device not in (None, "cpu"):
        raise ValueError(f'mizu.{function} makes arrays in host memory: device must be None or "cpu", got {device!r}')


def _shape_tuple(shape):
    try:
        dims = tuple(operator.index(n) for n in shape)
    except TypeError:
        dims = (operator.index(shape),)
    if any(n < 0 for n in dims):
        raise ValueError("negative dimensions are not allowed")
    return dims


def _element_type(dtype, shape):
    """The dtype numpy would give the elements, and the shape with a subarray dtype's dimensions appended."""
    dtype = np.dtype(dtype)
    if dtype.subdtype is not None:
        dtype, inner = dtype.subdtype
        shape = shape + inner
    # numpy gives a string dtype with no size, such as dtype=str, one character.
    dtype = np.empty(0, dtype).dtype
    if dtype.hasobject:
        raise TypeError(f"mizu cannot put dtype {dtype} in shared memory: object arrays hold pointers into one "
                        "process's heap. Use numpy for them, or a fixed-size dtype such as a string or structured one")
    return dtype, shape


def _order_code(order, allowed, default):
    """numpy's reading of an order argument: None means the default, and case does not matter."""
    if order is None:
        return default
    if isinstance(order, str) and order.upper() in allowed:
        return order.upper()
    if allowed == ("C", "F"):
        raise ValueError("only 'C' or 'F' order is permitted")
    raise ValueError(f"order must be one of {', '.join(map(repr, allowed))} (got {order!r})")


def _in_arena(shape, dtype, layout):
    """A new array in a block of the default arena.

    layout is 'C', 'F', or the axes of shape from the slowest varying to the
    fastest; a subarray dtype's axes come after them, fastest of all.
    """
    dtype, full_shape = _element_type(dtype, _shape_tuple(shape))
    order = "F" if layout == "F" else "C"
    nbytes = dtype.itemsize
    for n in full_shape:
        nbytes *= n
    strides = None
    if nbytes == 0:
        # numpy 2 gives an empty array zero strides, numpy 1 contiguous ones: ask it.
        strides = np.empty(full_shape, dtype, order).strides
    elif not isinstance(layout, str):
        strides = [0] * len(full_shape)
        stride = dtype.itemsize
        for axis in reversed([*layout, *range(len(layout), len(full_shape))]):
            strides[axis] = stride
            stride *= full_shape[axis]
    block = default_arena().alloc(nbytes)
    return np.ndarray(full_shape, dtype, buffer=block, order=order, strides=strides)


def _zero(arr):
    """Zero every byte of an array that fills its block, as numpy.zeros does for every dtype."""
    np.frombuffer(_walk_to_block(arr, np.ndarray), np.uint8).fill(0)


def empty(shape, dtype=float, order="C", *, device=None, like=None):
    """empty(shape, dtype=float, order='C', *, device=None, like=None)

    A new array in shared memory, without initializing its entries.

    As `numpy.empty`, but the data lives in a block of `default_arena`.

    Parameters
    ----------
    shape : int or tuple of int
        Shape of the new array.
    dtype : data-type, optional
        Any dtype but object (or one holding objects). Default is
        `numpy.float64`.
    order : {'C', 'F'}, optional
        Row-major (C) or column-major (Fortran) layout.
    device : None or "cpu", optional
        Accepted for compatibility with numpy; the array is in host memory.
    like : None, optional
        Accepted for compatibility with numpy; any other value is an error.

    Returns
    -------
    numpy.ndarray
        Uninitialized data (whatever the block held before) of the given
        shape, dtype and order. Its data starts on a 128-byte boundary.

    Raises
    ------
    TypeError
        `dtype` holds Python objects, or `like` was given.
    MemoryError
        The arena's limit leaves no room.

    See Also
    --------
    zeros, full, empty_like, numpy.empty
    """
    _check_numpy_only("empty", like, device)
    return _in_arena(shape, dtype, _order_code(order, ("C", "F"), "C"))


def zeros(shape, dtype=float, order="C", *, device=None, like=None):
    """zeros(shape, dtype=float, order='C', *, device=None, like=None)

    A new array in shared memory, filled with zeros.

    As `numpy.zeros`, but the data lives in a block of `default_arena`.
    The parameters are `empty`'s.

    Returns
    -------
    numpy.ndarray
        Every byte zero, as `numpy.zeros` gives for any dtype.

    See Also
    --------
    empty, zeros_like, numpy.zeros
    """
    _check_numpy_only("zeros", like, device)
    arr = _in_arena(shape, dtype, _order_code(order, ("C", "F"), "C"))
    _zero(arr)
    return arr


def full(shape, fill_value, dtype=None, order="C", *, device=None, like=None):
    """full(shape, fill_value, dtype=None, order='C', *, device=None, like=None)

    A new array in shared memory, filled with `fill_value`.

    As `numpy.full`, but the data lives in a block of `default_arena`.

    Parameters
    ----------
    shape : int or tuple of int
        Shape of the new array.
    fill_value : scalar or array_like
        Fill value, broadcast to `shape`.
    dtype : data-type, optional
        The default, None, means ``numpy.asarray(fill_value).dtype``.
        Object dtypes are refused.
    order, device, like : optional
        As for `empty`.

    Returns
    -------
    numpy.ndarray
        `fill_value` cast (unsafely, as numpy does) to `dtype`.

    See Also
    --------
    empty, zeros, numpy.full
    """
    _check_numpy_only("full", like, device)
    if dtype is None:
        fill_value = np.asarray(fill_value)
        dtype = fill_value.dtype
    arr = _in_arena(shape, dtype, _order_code(order, ("C", "F"), "C"))
    np.copyto(arr, fill_value, casting="unsafe")
    return arr


def _like_layout(prototype, order, shape):
    """The layout numpy.empty_like gives, as _in_arena takes it."""
    ndim = len(shape)
    order = _order_code(order, ("C", "F", "A", "K"), "K")
    fortran = prototype.flags.f_contiguous and not prototype.flags.c_contiguous
    if order == "A":
        return "F" if fortran else "C"
    if order != "K":
        return order
    if ndim != prototype.ndim or ndim <= 1 or prototype.flags.c_contiguous:
        return "C"
    if prototype.flags.f_contiguous:
        return "F"
    # Keep the axes' order by their strides' size, as numpy does: largest
    # first, ties in axis order.
    return sorted(range(ndim), key=lambda axis: (-abs(prototype.strides[axis]), axis))


def _like(function, prototype, dtype, order, subok, shape, device):
    _check_numpy_only(function, device=device)
    if not isinstance(prototype, np.ndarray):
        prototype = np.asarray(prototype)
    shape = prototype.shape if shape is None else _shape_tuple(shape)
    arr = _in_arena(shape, prototype.dtype if dtype is None else dtype, _like_layout(prototype, order, shape))
    if subok and type(prototype) is not np.ndarray:
        arr = arr.view(type(prototype))
    return arr


def empty_like(prototype, dtype=None, order="K", subok=True, shape=None, *, device=None):
    """empty_like(prototype, dtype=None, order='K', subok=True, shape=None, *, device=None)

    A new array in shared memory with the shape and type of `prototype`,
    without initializing its entries.

    As `numpy.empty_like`, but the data lives in a block of `default_arena`.

    Parameters
    ----------
    prototype : array_like
        Its shape, dtype and layout define the result's.
    dtype : data-type, optional
        Overrides the prototype's; object dtypes are refused.
    order : {'C', 'F', 'A', 'K'}, optional
        Layout of the result: 'A' is 'F' if `prototype` is Fortran
        contiguous, else 'C'; 'K' matches the prototype's layout as closely
        as possible.
    subok : bool, optional
        If True (the default) and `prototype` is of a subclass of
        `numpy.ndarray`, the result is a view of that class; otherwise a
        `numpy.ndarray`.
    shape : int or tuple of int, optional
        Overrides the prototype's shape. With order 'K' and a different
        number of dimensions, the result is C ordered.
    device : None or "cpu", optional
        Accepted for compatibility with numpy; the array is in host memory.

    Returns
    -------
    numpy.ndarray

    See Also
    --------
    zeros_like, empty, numpy.empty_like
    """
    return _like("empty_like", prototype, dtype, order, subok, shape, device)


def zeros_like(prototype, dtype=None, order="K", subok=True, shape=None, *, device=None):
    """zeros_like(prototype, dtype=None, order='K', subok=True, shape=None, *, device=None)

    A new array in shared memory with the shape and type of `prototype`,
    filled with zeros.

    As `numpy.zeros_like`, but the data lives in a block of `default_arena`.
    The parameters are `empty_like`'s.

    Returns
    -------
    numpy.ndarray
        Every byte zero.

    See Also
    --------
    empty_like, zeros, numpy.zeros_like
    """
    arr = _like("zeros_like", prototype, dtype, order, subok, shape, device)
    _zero(arr)
    return arr


def _has_order(arr, order):
    if order == "C":
        return arr.flags.c_contiguous
    if order == "F":
        return arr.flags.f_contiguous
    return True


def asarray(a, dtype=None, order=None, *, device=None, copy=None, like=None):
    """asarray(a, dtype=None, order=None, *, device=None, copy=None, like=None)

    `a` as an array in shared memory: itself if it already is one, else a copy.

    As `numpy.asarray`, but the result's data lives in an arena block.

    Parameters
    ----------
    a : array_like
        Anything `numpy.asarray` takes, but object arrays.
    dtype : data-type, optional
        By default, the dtype numpy infers from `a`.
    order : {None, 'C', 'F', 'A', 'K'}, optional
        Layout: 'C' and 'F' ask for that contiguity; the others keep an
        arena-backed `a` as it is, and lay a copy out as `a` is laid out.
    device : None or "cpu", optional
        Accepted for compatibility with numpy; the array is in host memory.
    copy : bool, optional
        True: always copy into a new block. False: never copy; raise if `a`
        is not already in shared memory with the requested dtype and order.
        None (the default): copy only when needed.
    like : None, optional
        Accepted for compatibility with numpy; any other value is an error.

    Returns
    -------
    numpy.ndarray
        `a` itself when it is an arena-backed `numpy.ndarray` with the
        requested dtype and order (a base-class view of it for a subclass),
        else a new arena-backed array holding its values.

    Raises
    ------
    TypeError
        The values need an object dtype.
    ValueError
        `copy` is False and a copy is needed.

    See Also
    --------
    arena_block, numpy.asarray
    """
    _check_numpy_only("asarray", like, device)
    order = _order_code(order, ("C", "F", "A", "K"), "K")
    if isinstance(a, np.ndarray) and not a.dtype.hasobject:
        src = np.asarray(a)
    else:
        src = np.asarray(a, dtype=dtype)
    target = src.dtype if dtype is None else np.dtype(dtype)
    if target.itemsize == 0 and target.kind in "SUV":
        # numpy's dtype for the cast, which sizes dtype=str from the source.
        target = np.empty(0, src.dtype).astype(target).dtype
    if copy is not True and src.dtype == target and _has_order(src, order) and arena_block(src) is not None:
        return src
    if copy is False:
        raise ValueError("mizu.asarray(copy=False): the array is not in shared memory with the requested dtype "
                         "and order, and only a copy can put it there")
    # numpy lays out a cast's result as order 'K' even when asked for 'A'.
    out = _like("asarray", src, target, "K" if order == "A" and target != src.dtype else order, False, None, None)
    np.copyto(out, src, casting="unsafe")
    return out
