"""Arrays in shared memory: numpy's creation functions are the oracle, the arena holds the data."""

import gc
import multiprocessing
import os
import pickle
import tempfile
import threading

import numpy as np
import pytest
from hypothesis import given, reject
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import arrays_children
import mizu
from mizu import _arena
from mizu._pickler import file_mapping

shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)
dtypes = st.one_of(
    hnp.scalar_dtypes(),
    hnp.byte_string_dtypes(),
    hnp.unicode_string_dtypes(),
    hnp.array_dtypes(subtype_strategy=hnp.scalar_dtypes(), max_size=3),
    hnp.integer_dtypes(endianness=">"),
)
orders = st.sampled_from(["C", "F", "c", "f", None])
like_orders = st.sampled_from(["C", "F", "A", "K", "k", None])


def byte_bounds(arr):
    try:
        from numpy.lib.array_utils import byte_bounds as bounds
    except ImportError:  # numpy < 2
        bounds = np.byte_bounds
    return bounds(arr)


def assert_in_arena(arr):
    """arr is a plain ndarray whose data fills an arena block from its 128-byte aligned start."""
    assert type(arr) is np.ndarray
    found = mizu.arena_block(arr)
    assert found is not None
    block, offset, nbytes = found
    assert (offset, nbytes) == (0, arr.nbytes) and block.nbytes == arr.nbytes
    assert arr.ctypes.data == block.address and block.address % 128 == 0
    base = arr
    while isinstance(base, np.ndarray):
        base = base.base
    assert base is block


def steps(arr):
    """The strides that matter: those of axes longer than one."""
    return [stride for n, stride in zip(arr.shape, arr.strides) if n > 1]


def assert_same_layout(ours, theirs):
    assert (ours.shape, ours.dtype, steps(ours)) == (theirs.shape, theirs.dtype, steps(theirs))
    assert (ours.flags.c_contiguous, ours.flags.f_contiguous) == (theirs.flags.c_contiguous, theirs.flags.f_contiguous)


def both(ours, theirs):
    """Results of the two calls; if numpy raises, checks that mizu raises alike and rejects the example."""
    try:
        expected = theirs()
    except Exception as exc:
        with pytest.raises(type(exc)):
            ours()
        reject()
    return ours(), expected


def same_values(ours, theirs):
    return ours.tobytes() == theirs.tobytes()


@given(shape=shapes, dtype=dtypes, order=orders)
def test_empty_and_zeros_match_numpy(shape, dtype, order):
    ours, theirs = mizu.empty(shape, dtype, order), np.empty(shape, dtype, order)
    assert_same_layout(ours, theirs)
    assert_in_arena(ours)
    ours, theirs = mizu.zeros(shape, dtype, order=order), np.zeros(shape, dtype, order=order)
    assert_same_layout(ours, theirs)
    assert_in_arena(ours)
    assert same_values(ours, theirs)


@given(shape=shapes, dtype=dtypes, order=orders, fill=st.sampled_from([1, 0, -2, 2.5, True]))
def test_full_matches_numpy(shape, dtype, order, fill):
    with np.errstate(all="ignore"):
        ours, theirs = both(lambda: mizu.full(shape, fill, dtype, order), lambda: np.full(shape, fill, dtype, order))
    assert_same_layout(ours, theirs)
    assert_in_arena(ours)
    assert same_values(ours, theirs)


@given(shape=shapes, fill=st.one_of(st.integers(-5, 5), st.floats(allow_nan=False), st.text(max_size=3)))
def test_full_infers_the_dtype_of_the_fill_value(shape, fill):
    ours, theirs = mizu.full(shape, fill), np.full(shape, fill)
    assert_same_layout(ours, theirs)
    assert same_values(ours, theirs)


@st.composite
def views(draw, make=np.zeros):
    """A random view of a new array: steps and reversals along each axis, then a transpose."""
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6))
    base = make(shape, draw(st.sampled_from(["f8", "i2", "u1", "c16", "M8[ms]", "S3"])), order=draw(orders))
    index = tuple(slice(None, None, draw(st.sampled_from([1, 2, -1, -3]))) for _ in shape)
    return base[(*index, ...)].transpose(draw(st.permutations(range(len(shape)))))


@given(
    prototype=views(),
    dtype=st.one_of(st.none(), st.sampled_from(["f4", "i8", "U2"])),
    order=like_orders,
    shape=st.one_of(st.none(), hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)),
    zero=st.booleans(),
)
def test_empty_like_and_zeros_like_match_numpy(prototype, dtype, order, shape, zero):
    make = (mizu.zeros_like, np.zeros_like) if zero else (mizu.empty_like, np.empty_like)
    ours, theirs = (f(prototype, dtype, order, shape=shape) for f in make)
    assert_same_layout(ours, theirs)
    assert_in_arena(ours)
    if zero:
        assert same_values(ours, theirs)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_like_keeps_a_subclass_unless_told_not_to():
    prototype = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    ours = mizu.zeros_like(prototype)
    assert type(ours) is type(np.zeros_like(prototype)) is np.matrix
    assert ours.shape == (2, 2) and not ours.any()
    assert mizu.arena_block(ours) is not None
    assert type(mizu.empty_like(prototype, subok=False)) is np.ndarray


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")
@given(a=views(), dtype=st.one_of(st.none(), st.sampled_from(["f8", "i4", "U25"])), order=like_orders)
def test_asarray_copies_other_arrays_into_the_arena_as_numpy_lays_them_out(a, dtype, order):
    ours, theirs = both(lambda: mizu.asarray(a, dtype, order), lambda: np.asarray(a, dtype, order))
    assert_same_layout(ours, np.array(a, dtype, order=order, copy=True) if theirs is a else theirs)
    assert_in_arena(ours)
    assert np.array_equal(ours, theirs)


@given(a=views(make=mizu.zeros), order=like_orders)
def test_asarray_returns_an_arena_array_itself(a, order):
    if order in ("C", "F") and not a.flags[order + "_CONTIGUOUS"]:
        assert not np.shares_memory(mizu.asarray(a, order=order), a)
    else:
        assert mizu.asarray(a, order=order) is a
        assert mizu.asarray(a, a.dtype, copy=False) is a
    copy = mizu.asarray(a, copy=True)
    assert np.array_equal(copy, a) and not np.shares_memory(copy, a)
    assert_in_arena(copy)


def test_asarray_of_python_values_matches_numpy():
    for value in ([1, 2, 3], [[1.5, 2], [3, 4]], 7, "text", [b"ab", b"c"], (True, False), []):
        ours, theirs = mizu.asarray(value), np.asarray(value)
        assert_same_layout(ours, theirs)
        assert_in_arena(ours)
        assert same_values(ours, theirs)
    assert mizu.asarray([1, 2], dtype=np.float32).dtype == np.float32
    assert mizu.asarray(np.arange(3), dtype=str).tolist() == ["0", "1", "2"]
    block = mizu.arena_block(mizu.zeros(4))[0]
    assert mizu.arena_block(mizu.asarray(memoryview(block)))[0] is block


def test_unsupported_arguments_are_refused_by_name():
    with pytest.raises(TypeError, match="object arrays hold pointers"):
        mizu.zeros(3, dtype=object)
    with pytest.raises(TypeError, match="object arrays hold pointers"):
        mizu.empty(2, dtype=[("a", "f8"), ("b", "O")])
    with pytest.raises(TypeError, match="object arrays hold pointers"):
        mizu.asarray([1, "a", None])
    with pytest.raises(TypeError, match="object arrays hold pointers"):
        mizu.full(2, None)
    with pytest.raises(TypeError, match="like="):
        mizu.empty(3, like=np.zeros(1))
    with pytest.raises(ValueError, match="device"):
        mizu.zeros_like(np.zeros(2), device="gpu")
    assert mizu.zeros(2, device="cpu").shape == (2,)
    with pytest.raises(ValueError, match="only 'C' or 'F' order"):
        mizu.empty(3, order="K")
    with pytest.raises(ValueError, match="order must be one of"):
        mizu.empty_like(np.zeros(3), order="X")
    with pytest.raises(ValueError, match="negative dimensions"):
        mizu.zeros((2, -1))
    with pytest.raises(ValueError, match="copy=False"):
        mizu.asarray(np.zeros(3), copy=False)


def test_arrays_take_arena_memory_and_give_it_back():
    arena = mizu.default_arena()
    gc.collect()
    start = arena.stats()["in_use"]
    arrays = [mizu.zeros((100, 100)), mizu.full(1000, 3, "i4"), mizu.empty_like(np.zeros((7, 3)), order="F")]
    views = [arrays[0][::2, 1:], arrays[1][::-1]]
    assert arena.stats()["in_use"] >= start + 80000 + 4000 + 168
    del arrays
    assert arena.stats()["in_use"] > start  # the views hold their blocks
    del views
    assert arena.stats()["in_use"] == start


def test_the_default_arena_is_one_per_process_even_across_threads():
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(mizu.default_arena())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(arena is mizu.default_arena() for arena in seen) and len(seen) == 8


@given(view=views(make=mizu.zeros))
def test_arena_block_places_every_view(view):
    block, offset, nbytes = mizu.arena_block(view)
    low, high = byte_bounds(view)
    assert (block.address + offset, nbytes) == (low, high - low)
    again = np.ndarray(view.shape, view.dtype, buffer=block, offset=view.ctypes.data - block.address,
                       strides=view.strides)
    assert again.tobytes() == view.tobytes()
    assert np.shares_memory(again, view) or view.size == 0


def test_arena_block_through_memoryviews_pickle_buffers_and_reshapes():
    a = mizu.zeros((6, 8), np.int16)
    block = mizu.arena_block(a)[0]
    assert mizu.arena_block(block) == (block, 0, 96)
    assert mizu.arena_block(memoryview(a)[2:4]) == (block, 32, 32)
    assert mizu.arena_block(pickle.PickleBuffer(a[1:])) == (block, 16, 80)
    assert mizu.arena_block(np.asarray(memoryview(a[3]))[1::2]) == (block, 50, 14)
    assert mizu.arena_block(a.reshape(4, 12)[1:].T) == (block, 24, 72)
    assert mizu.arena_block(a[:, 2:5][1:3].view(np.uint8)[:, 1:]) == (block, 21, 21)
    assert mizu.arena_block(a[5, 7]) is None  # a scalar is a copy
    assert mizu.arena_block(a[5:, 7:][0]) == (block, 94, 2)  # a 0-d view
    assert mizu.arena_block(a[3:3])[::2] == (block, 0)


def test_arena_block_is_none_for_memory_elsewhere():
    plain = np.zeros(10)
    raw = bytearray(100)
    for obj in (plain, plain[::2], raw, memoryview(raw), b"bytes", np.frombuffer(raw, np.uint8), pickle.PickleBuffer(raw),
                3, None, "text", [1, 2]):
        assert mizu.arena_block(obj) is None
    block = _arena.Arena(segment_size=1 << 16).alloc(64)  # any arena counts, not only the default one
    assert mizu.arena_block(np.frombuffer(block, np.float64)[2:]) == (block, 16, 48)


def test_a_forked_child_writes_into_its_parents_array():
    ctx = multiprocessing.get_context("fork")
    out = mizu.zeros(1000, np.int64)
    workers = [ctx.Process(target=arrays_children.fill_slice, args=(out, i * 250, (i + 1) * 250, i + 1))
               for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert [w.exitcode for w in workers] == [0] * 4
    assert np.array_equal(out, np.repeat(np.arange(1, 5), 250))


def test_a_forked_child_makes_arrays_in_an_arena_of_its_own():
    ctx = multiprocessing.get_context("fork")
    parent = mizu.default_arena()
    report, there = ctx.Pipe(duplex=False)
    child = ctx.Process(target=arrays_children.arrays_in_child, args=(parent.id, there))
    child.start()
    assert report.poll(60)
    assert report.recv() == (True, True, 1000.0)
    child.join(60)
    assert child.exitcode == 0
    assert mizu.default_arena() is parent


number_dtypes = st.one_of(
    hnp.boolean_dtypes(),
    hnp.integer_dtypes(endianness="?"),
    hnp.unsigned_integer_dtypes(endianness="?"),
    hnp.floating_dtypes(endianness="?", sizes=(16, 32, 64, 128)),
    hnp.complex_number_dtypes(endianness="?", sizes=(64, 128, 256)),
    st.sampled_from([np.dtype(c) for c in "qQnNpPlLgG"] + [np.dtype("i1", metadata={"enum": 1}),
                                                         np.dtype(">f8", metadata={"unit": "m"})]),
)


@given(shape=shapes, dtype=number_dtypes, order=st.sampled_from(["C", "F"]), writeable=st.booleans(),
       out_of_band=st.booleans(), arena=st.booleans())
def test_arrays_pickled_for_a_worker_unpickle_as_numpy_s_own_pickle_does(shape, dtype, order, writeable,
                                                                           out_of_band, arena):
    """mizu pickles arrays of builtin number types itself: what arrives is what numpy's own pickle gives.

    Except that the exact type of the items is kept, where numpy's pickle of
    numpy.longlong, say, gives numpy.int64 (its equal).
    """
    from mizu._pickler import dumps, loads

    array = (mizu.zeros if arena else np.zeros)(shape, dtype, order=order)
    raw = (np.arange(array.nbytes) % 251).astype(np.uint8).tobytes()
    np.copyto(array, np.frombuffer(raw, array.dtype).reshape(array.shape))
    array.flags.writeable = writeable
    buffers = []
    data = dumps(array, (lambda b: buffers.append(b.raw()) or False) if out_of_band else None)
    ours = loads(data, buffers=buffers)
    kept = []
    theirs = pickle.loads(pickle.dumps(array, 5, buffer_callback=kept.append if out_of_band else None),
                          buffers=[b.raw() for b in kept])
    assert type(ours) is type(theirs) and ours.shape == theirs.shape and ours.dtype == theirs.dtype
    assert ours.dtype.type is (array.dtype.type if array.dtype.isbuiltin == 1 else theirs.dtype.type)
    assert ours.flags.writeable == theirs.flags.writeable
    assert (ours.flags.c_contiguous, ours.flags.f_contiguous) == (theirs.flags.c_contiguous,
                                                                   theirs.flags.f_contiguous)
    assert ours.tobytes() == theirs.tobytes()


class _Sharer:
    """Names, as mizu pickles it, a share for the arrays pickled after it; unpickles as 0."""

    def __init__(self, share):
        self.share = share

    def __reduce__(self):
        return int, ()


class _Nested:
    """Pickles inner in a message of its own as its reduction is made; unpickles as 0."""

    seen = []   # what the inner values unpickled as

    def __init__(self, inner):
        self.inner = inner

    def __reduce__(self):
        from mizu._pickler import dumps, loads

        _Nested.seen.append(loads(dumps(self.inner)))
        return int, ()


@given(
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=6),
    dtype=st.sampled_from(["f8", "i2", "u1", "c16", "M8[ms]", "S3", ">i4"]),
    order=st.sampled_from(["C", "F"]),
    header=st.integers(0, 9000),
    data=st.data(),
    mode=st.sampled_from(["r", "r+", "w+", "c"]),
    read_only=st.booleans(),
)
def test_a_memmap_view_pickled_by_its_file_mapping_is_the_same_bytes_of_the_same_file(
        shape, dtype, order, header, data, mode, read_only):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "data")
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        items = (np.arange(nbytes) % 251 + 1).astype(np.uint8)   # no item's bytes all zero
        if mode == "w+":
            mapped = np.memmap(path, dtype, mode, header, shape, order)
            mapped.ravel(order="K").view(np.uint8)[:] = items
        else:
            with open(path, "wb") as file:
                file.write(bytes(header) + items.tobytes())
            mapped = np.memmap(path, dtype, mode, header, shape, order)
        index = tuple(slice(None, None, data.draw(st.sampled_from([1, 2, -1, -3]))) for _ in shape)
        view = mapped[(*index, ...)].transpose(data.draw(st.permutations(range(len(shape)))))
        if data.draw(st.booleans()):
            view = np.asarray(view)
        if read_only:
            view.flags.writeable = False
        reduction = file_mapping(view)
        if mode == "c":
            assert reduction is None, "a copy-on-write memmap's memory may differ from its file"
            return
        func, args = pickle.loads(pickle.dumps(reduction))
        got = func(*args)
        assert (got.shape, got.dtype, got.tobytes()) == (view.shape, view.dtype, view.tobytes())
        assert got.flags.writeable == (mode != "r" and not read_only)
        if got.flags.writeable:
            got.flat[0] = np.zeros((), dtype)
            assert np.ravel(view)[:1].tobytes() == bytes(view.itemsize), "got maps the bytes that view maps"
        del got, view, mapped


def test_a_memmap_whose_file_is_gone_or_shorter_has_no_file_mapping(tmp_path):
    path = tmp_path / "data"
    np.arange(1000.0).tofile(path)
    mapped = np.memmap(path, np.float64, "r")
    assert file_mapping(mapped[10:]) is not None
    windows = np.lib.stride_tricks.as_strided
    assert file_mapping(windows(mapped, (100, 10), (80, 8))) is not None
    head = np.memmap(path, np.float64, "r", shape=(500,))
    assert file_mapping(windows(head, (500,), (8,))) is not None
    assert file_mapping(windows(head, (501,), (8,))) is None, "strides made by hand beyond the memmap"
    os.truncate(path, 8 * 500)
    assert file_mapping(mapped[10:]) is None
    assert file_mapping(mapped[:400]) is not None
    os.unlink(path)
    assert file_mapping(mapped[:400]) is None


class _OwnBase:
    """An array's exporter whose .base is itself."""

    def __init__(self):
        self.data = np.arange(3.0)
        self.__array_interface__ = self.data.__array_interface__
        self.base = self


def test_memmap_under_ends_on_a_base_that_is_its_own():
    from mizu._pickler import memmap_under

    assert memmap_under(np.asarray(_OwnBase())) is None


class _Unpicklable:
    def __reduce__(self):
        raise TypeError("not this one")


def test_an_object_s_share_goes_for_the_arrays_after_it_in_its_own_value_only():
    from mizu._pickler import dumps, loads, share_arrays_after

    share_arrays_after(_Sharer, lambda sharer: sharer.share)
    doubled = lambda array: array * 2   # noqa: E731
    a, b, c = np.arange(4), np.arange(4, 8), np.arange(8, 12)
    got = loads(dumps([a, _Sharer(doubled), b, {"in": (c, "x")}, _Sharer(None), c.copy()]))
    np.testing.assert_array_equal(got[0], a)
    np.testing.assert_array_equal(got[2], 2 * b)
    np.testing.assert_array_equal(got[3]["in"][0], 2 * c)
    np.testing.assert_array_equal(got[5], c)
    np.testing.assert_array_equal(loads(dumps([b])), [b], err_msg="the next value goes its own way")

    _Nested.seen.clear()
    got = loads(dumps([_Sharer(doubled), _Nested([b]), c]))
    np.testing.assert_array_equal(_Nested.seen[0], [b], err_msg="a value pickled meanwhile goes its own way")
    np.testing.assert_array_equal(got[2], 2 * c, err_msg="and the first value's share goes on")

    with pytest.raises(TypeError, match="not this one"):
        dumps([_Sharer(doubled), _Unpicklable()])
    np.testing.assert_array_equal(loads(dumps(b)), b, err_msg="a pickle that failed leaves nothing behind")


def test_a_share_may_give_a_reduction_such_as_a_memmap_s_file_mapping(tmp_path):
    from mizu._pickler import dumps, loads, share_arrays_after

    share_arrays_after(_Sharer, lambda sharer: sharer.share)
    np.arange(100.0).tofile(tmp_path / "data")
    mapped = np.memmap(tmp_path / "data", np.float64, "r+")
    by_file = lambda array: file_mapping(array) or array   # noqa: E731
    got = loads(dumps([_Sharer(by_file), mapped, mapped[::-3], np.asarray(mapped)[2:], np.arange(3)]))
    assert [type(array) for array in got[1:]] == [np.memmap, np.ndarray, np.memmap, np.ndarray]
    for ours, theirs in zip(got[1:], [mapped, mapped[::-3], mapped[2:], np.arange(3)]):
        np.testing.assert_array_equal(ours, theirs)
    got[2][0] = -1
    assert mapped[99] == -1 and np.fromfile(tmp_path / "data")[99] == -1, "the write reaches the file"
    assert type(loads(dumps(mapped))) is np.memmap and file_mapping(mapped) is not None
