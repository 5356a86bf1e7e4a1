"""Values between Python and R workers, over real shared memory.

Python encodes values with mizu's wire encoder (arrays in arena blocks
as arena references, which mizu._wire does not write yet, so this module
writes those records itself), an Rscript decodes them with the R
package, computes, and encodes the result, which Python reads back. The
oracle is R itself: R checks what it decoded against the R value that
the mapping of doc/user/r.rst promises, written as R source, and
computations on shared-memory views are checked against a separate
Rscript computing the same from a plain copy of the bytes.
"""

import math
import re
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import mizu
from mizu._arena import open_block
from mizu._wire import decode, encode

from rsession import RError, run_rscript

INT32_MIN = -(2**31)
EXACT = 2**53


# Writing messages: the Python encoder for everything but arena arrays.

def _fragment(value, shares):
    if isinstance(value, np.ndarray) and mizu.arena_block(value) is not None:
        return _arena_record(value, shares)
    if isinstance(value, (list, tuple)):
        return (b"l" if isinstance(value, list) else b"t") + struct.pack("<I", len(value)) + b"".join(
            _fragment(item, shares) for item in value)
    if isinstance(value, dict):
        parts = [b"m", struct.pack("<I", len(value))]
        for key, item in value.items():
            key = key.encode()
            parts += [struct.pack("<Q", len(key)), key, _fragment(item, shares)]
        return b"".join(parts)
    encoded = encode(value)
    assert encoded[2:3] != b"P", f"{value!r} has no wire form but a pickle"
    return encoded[2:]


def _arena_record(arr, shares):
    """An ndarray record naming arr's bytes in its arena block, with the reference R adopts."""
    block, low, span = mizu.arena_block(arr)
    assert all(stride >= 0 for stride in arr.strides)
    typestr = arr.dtype.str.encode()
    shares.append((block.share(), block.fd, low, span))
    return b"".join([b"a", bytes([len(typestr)]), typestr, struct.pack("<IB", arr.itemsize, arr.ndim),
                     struct.pack(f"<{arr.ndim}Q", *arr.shape), struct.pack(f"<{arr.ndim}q", *arr.strides),
                     b"\x01", struct.pack("<I", len(shares) - 1)])


def message(value):
    """The wire message of value and the (reference, descriptor, offset, length) of each buffer it names."""
    shares = []
    return b"W\x01" + _fragment(value, shares), shares


# Reading R's answers: the wire format plus the two records R writes that
# mizu._wire does not read yet, arena references and masked arrays.

class _Reader:
    def __init__(self, data, blocks):
        assert data[:2] == b"W\x01"
        self.data, self.pos, self.blocks = data, 2, blocks

    def take(self, fmt):
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values[0] if len(values) == 1 else values

    def span(self):
        n = self.take("<Q")
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def value(self):
        tag = chr(self.data[self.pos])
        self.pos += 1
        if tag in "NFT":
            return {"N": None, "F": False, "T": True}[tag]
        if tag == "i":
            return self.take("<q")
        if tag == "d":
            return self.take("<d")
        if tag == "s":
            return self.span().decode()
        if tag == "b":
            return self.span()
        if tag in "lt":
            items = [self.value() for _ in range(self.take("<I"))]
            return items if tag == "l" else tuple(items)
        if tag == "m":
            return {self.span().decode(): self.value() for _ in range(self.take("<I"))}
        if tag == "a":
            return self.array()
        if tag == "M":
            values, mask = self.value(), self.value()
            return np.ma.MaskedArray(values, mask=mask)
        raise AssertionError(f"unexpected tag {tag!r} at byte {self.pos - 1}")

    def array(self):
        typestr = self.data[self.pos + 1:self.pos + 1 + self.data[self.pos]].decode()
        self.pos += 1 + len(typestr)
        itemsize, ndim = self.take("<IB")
        shape = [self.take("<Q") for _ in range(ndim)]
        strides = [self.take("<q") for _ in range(ndim)]
        if self.take("<B") == 0:
            data = self.span()
        else:
            block, offset, length = self.blocks[self.take("<I")]
            data = bytes(memoryview(block)[offset:offset + length])
        dtype = np.dtype(typestr)
        assert dtype.itemsize == itemsize
        return np.ndarray(shape, dtype, buffer=data, strides=strides).copy()


def read_answer(data, records):
    """R's answer, opening (and then dropping) the blocks of R's arena its buffer records name."""
    blocks = []
    for record in records:
        offset, length = struct.unpack_from("<QQ", record, 40)
        blocks.append((open_block(record[:40]), offset, length))
    return _Reader(data, blocks).value()


def ask(session, code, value=None, inline_limit=1 << 16):
    """What R's `code` gives with x = value."""
    data, shares = message(value)
    return read_answer(*session.request(code, data, shares, inline_limit))


# What the mapping promises.

_R_TYPE = {"f": "double", "i": "integer", "u": "integer", "b": "logical", "c": "complex"}


def r_type(dtype):
    """The R type an array of dtype becomes."""
    if dtype == np.uint8:
        return "raw"
    if dtype.kind in "iu" and (dtype.itemsize == 8 or dtype == np.uint32):
        return "double"
    return _R_TYPE[dtype.kind]


_NUMPY_OF_R = {"double": np.float64, "integer": np.int32, "logical": np.bool_, "raw": np.uint8,
               "complex": np.complex128}


def through_r(value):
    """What value becomes after a trip to R and back."""
    if isinstance(value, bool) or value is None or isinstance(value, (float, str)):
        return value
    if isinstance(value, int):
        return value if INT32_MIN < value < 2**31 else float(value)
    if isinstance(value, bytes):
        return np.frombuffer(value, np.uint8)
    if isinstance(value, (list, tuple)):
        return [through_r(item) for item in value]
    if isinstance(value, dict):
        return {key: through_r(item) for key, item in value.items()}
    kind = r_type(value.dtype)
    arr = np.asarray(value, _NUMPY_OF_R[kind])
    if arr.ndim >= 2:
        return np.asfortranarray(arr)
    if arr.size != 1 or kind == "raw":
        return arr.reshape(-1)
    # A length-one vector without attributes is a scalar in Python, but
    # complex has no wire scalar and travels as a 0-d array.
    return arr.reshape(()) if kind == "complex" else arr.reshape(-1)[0].item()


def _r_double(x):
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Inf" if x > 0 else "-Inf"
    return float(x).hex()


def _r_string(s):
    return '"' + "".join(c if c.isascii() and c.isalnum() or c in " _.,;:-" else f"\\U{{{ord(c):x}}}"
                         for c in s) + '"'


def _r_vector(flat, kind):
    if len(flat) == 0:
        return f"{kind}(0)"
    if kind == "double":
        items = [_r_double(x) for x in flat]
    elif kind == "integer":
        items = [f"{int(x)}L" for x in flat]
    elif kind == "logical":
        items = ["TRUE" if x else "FALSE" for x in flat]
    elif kind == "raw":
        return f"as.raw(c({', '.join(str(int(x)) for x in flat)}))"
    else:
        return (f"complex(real = c({', '.join(_r_double(x.real) for x in flat)}), "
                f"imaginary = c({', '.join(_r_double(x.imag) for x in flat)}))")
    return f"c({', '.join(items)})"


def r_literal(value):
    """R source for the R value `value` decodes to."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return f"{value}L" if INT32_MIN < value < 2**31 else _r_double(float(value))
    if isinstance(value, float):
        return _r_double(value)
    if isinstance(value, str):
        return _r_string(value)
    if isinstance(value, bytes):
        return _r_vector(list(value), "raw")
    if isinstance(value, (list, tuple)):
        return f"list({', '.join(r_literal(item) for item in value)})"
    if isinstance(value, dict):
        return (f"setNames(list({', '.join(r_literal(item) for item in value.values())}), "
                f"{_character_vector(list(value)) if value else 'character(0)'})")
    kind = r_type(value.dtype)
    flat = np.asarray(value, _NUMPY_OF_R[kind]).reshape(-1, order="F")
    vector = _r_vector(flat.tolist(), kind)
    return vector if value.ndim < 2 else f"array({vector}, dim = c({', '.join(f'{n}L' for n in value.shape)}))"


def _character_vector(items):
    return f"c({', '.join(_r_string(item) for item in items)})"



def assert_same(actual, expected):
    """Equal in value and in type, NaN equal to NaN, arrays in dtype and shape too."""
    if isinstance(expected, np.ma.MaskedArray):
        assert isinstance(actual, np.ma.MaskedArray)
        np.testing.assert_array_equal(actual.mask, expected.mask)
        np.testing.assert_array_equal(actual.filled(0), expected.filled(0))
        assert actual.dtype == expected.dtype
    elif isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray) and not isinstance(actual, np.ma.MaskedArray), actual
        assert (actual.dtype, actual.shape) == (expected.dtype, expected.shape)
        assert np.array_equal(actual, expected, equal_nan=expected.dtype.kind in "fc")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e)
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and list(actual) == list(expected)
        for key in expected:
            assert_same(actual[key], expected[key])
    elif isinstance(expected, float) and math.isnan(expected):
        assert isinstance(actual, float) and math.isnan(actual)
    else:
        assert type(actual) is type(expected) and actual == expected, (actual, expected)


# The check every value goes through: R decodes it to what the R source of
# the mapping says, as a view exactly when it should be one, and it comes
# back as the mapping says.
_CHECK = "list(same = identical(x, {literal}), view = !is.null(mizu:::view_info(x)), back = x)"


def check_round_trip(session, value, expect_view=False, inline_limit=1 << 16):
    answer = ask(session, _CHECK.format(literal=r_literal(value)), value, inline_limit)
    assert answer["same"] is True, f"R decoded {value!r} to something else than {r_literal(value)}"
    assert answer["view"] is expect_view
    assert_same(answer.get("back"), through_r(value))


# Strategies.

_texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8)
_plain = st.recursive(
    st.none() | st.booleans() | st.integers(-EXACT, EXACT) | st.floats(allow_nan=False) | st.just(math.nan)
    | _texts | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(_texts.filter(bool), inner, max_size=4),
    max_leaves=12)

_DTYPES = ["<f8", "<i4", "|b1", "|u1", "<i8", "<c16", "|i1", "<i2", "<u2", "<f4", "<u4", "<f2", "<c8", "<u8"]


def _elements(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return st.floats(width=8 * dtype.itemsize, allow_nan=False) | st.just(math.nan)
    if dtype.kind == "c":
        part = st.floats(width=4 * dtype.itemsize, allow_nan=False)
        return st.builds(complex, part, part)
    if dtype.kind == "b":
        return st.booleans()
    info = np.iinfo(dtype)
    low = max(info.min, -EXACT)
    return st.integers(INT32_MIN + 1 if dtype == np.int32 else low, min(info.max, EXACT))


@st.composite
def arrays(draw, large=st.just(False)):
    """Arrays of every dtype, shape and layout; if large draws True, repeated along axis 0 past 64 KiB."""
    dtype = np.dtype(draw(st.sampled_from(_DTYPES)))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
    values = draw(hnp.arrays(dtype, shape, elements=_elements(dtype)))
    if draw(large) and values.size:
        values = np.concatenate([values.reshape(values.shape or (1,))] * ((1 << 16) // values.nbytes + 1))
    layout = draw(st.sampled_from(["C", "F", "every other", "transposed"]))
    if layout == "F":
        values = np.asfortranarray(values)
    elif layout == "every other" and values.ndim:
        values = np.repeat(values, 2, axis=-1)[..., ::2]
    elif layout == "transposed":
        values = values.T
    return values


def in_arena(values):
    """values copied into a block of the default arena, in the same layout (and as a view, if it is one)."""
    if values.base is not None and not (values.flags.c_contiguous or values.flags.f_contiguous) and values.ndim:
        whole = mizu.empty(values.base.shape, values.dtype)
        whole[...] = values.base
        return whole[..., ::2]
    out = mizu.empty_like(values, order="K")
    out[...] = values
    return out


def r_layout(arr):
    """Whether R views arr's bytes as they are: R's element type, in Fortran order, more than 64 KiB."""
    return arr.dtype.str in ("<f8", "<i4", "|u1", "<c16") and arr.flags.f_contiguous and arr.nbytes > 1 << 16


# Tests.

@given(_plain)
def test_plain_values_decode_as_the_mapping_says_and_come_back(r_session, value):
    check_round_trip(r_session, value)


@given(arrays())
def test_inline_arrays_of_every_dtype_shape_and_order(r_session, values):
    check_round_trip(r_session, values)


@given(arrays(large=st.booleans()), st.sampled_from([0, 1 << 16]))
def test_arena_arrays_are_views_when_r_can_read_their_bytes_as_they_are(r_session, values, inline_limit):
    arr = in_arena(values)
    check_round_trip(r_session, arr, expect_view=r_layout(arr), inline_limit=inline_limit)


def test_arena_arrays_inside_containers(r_session):
    x, m = mizu.zeros(10_000), mizu.empty((300, 200), np.int32, order="F")
    x[:] = np.linspace(0, 1, 10_000)
    m[...] = np.arange(60_000, dtype=np.int32).reshape(300, 200)
    value = {"x": x, "parts": [m, "label", (1, 2.5)], "flags": mizu.full(3, True)}
    answer = ask(r_session, "list(views = vapply(list(x$x, x$parts[[1]], x$flags), function(v) "
                            "!is.null(mizu:::view_info(v)), TRUE), same = identical(x, {literal}))".format(
                                literal=r_literal(value)), value)
    assert_same(answer["views"], np.array([True, True, False]))
    assert answer["same"] is True


def test_blocks_of_segments_not_inherited_are_mapped_through_proc(r_session):
    # Larger than the default arena's segment: a segment of its own, made
    # after R started, which R maps through /proc/<pid>/fd.
    big = mizu.empty(5 << 20)
    big[:] = np.arange(big.size) * 0.5
    block, _, _ = mizu.arena_block(big)
    assert block.fd not in r_session.inherited
    answer = ask(r_session, "c(sum(x), x[length(x)], !is.null(mizu:::view_info(x)))", big)
    np.testing.assert_array_equal(answer, [big.sum(), big[-1], 1.0])


def test_a_view_of_a_python_array_costs_no_copy_and_r_writes_never_reach_it(r_session):
    arr = mizu.empty(1_000_000)
    arr[:] = np.random.default_rng(1).random(arr.size)
    original = arr.copy()
    answer = ask(r_session, """
        copies <- function() mizu:::view_counters(reset = TRUE)[["copies"]]
        mizu:::view_counters(reset = TRUE)
        m <- x
        dim(m) <- c(1000L, 1000L)
        reads <- list(sum = sum(x), twice = sum(x * 2), max = max(x), range = range(x), mean = mean(x),
                      col_means = colMeans(m))
        read_copies <- copies()
        x[1] <- 0
        in_place_copies <- copies()
        y <- x
        y[2] <- 0
        list(reads = reads, read_copies = read_copies, in_place_copies = in_place_copies,
             shared_copies = copies(), x12 = x[1:2], y12 = y[1:2], m1 = m[1], still_view = !is.null(mizu:::view_info(x)))
        """, arr)
    assert answer["read_copies"] == 0.0
    assert answer["in_place_copies"] == 0.0
    assert answer["shared_copies"] == 1.0
    assert answer["still_view"] is True
    np.testing.assert_array_equal(answer["x12"], [0.0, original[1]])
    np.testing.assert_array_equal(answer["y12"], [0.0, 0.0])
    assert answer["m1"] == original[0]
    # What R wrote stayed in R's private pages.
    np.testing.assert_array_equal(arr, original)
    reads = answer["reads"]
    assert reads["sum"] == pytest.approx(original.sum(), rel=1e-12)
    assert reads["max"] == original.max()
    np.testing.assert_array_equal(reads["range"], [original.min(), original.max()])
    np.testing.assert_allclose(reads["col_means"], original.reshape(1000, 1000, order="F").mean(axis=0), rtol=1e-12)


def test_computations_on_views_equal_r_on_a_plain_copy(r_session, r_library, tmp_path):
    arr = mizu.empty((500, 40), order="F")
    arr[...] = np.random.default_rng(2).standard_normal(arr.shape)
    code = "c(sum(x), mean(x), max(x), colMeans(x), quantile(x, c(0.1, 0.5)), sd(x), x[7, 3])"
    via_view = ask(r_session, code, arr)
    arr.reshape(-1, order="F").tofile(tmp_path / "x.bin")
    run_rscript(r_library, f'x <- readBin("{tmp_path / "x.bin"}", "double", {arr.size}); dim(x) <- c(500L, 40L); '
                           f'writeBin({code}, "{tmp_path / "oracle.bin"}")')
    oracle = np.fromfile(tmp_path / "oracle.bin")
    np.testing.assert_array_equal(via_view, oracle)
    assert via_view[-1] == arr[6, 2]


def test_large_results_come_back_in_r_arena_blocks(r_session):
    arr = mizu.empty(1_000_000)
    arr[:] = np.arange(arr.size, dtype=np.float64)
    data, shares = message(arr)
    result, refs = r_session.request("list(x * 2, as.integer(x[1:100000]), x[1:10] > 4)", data, shares)
    assert len(refs) == 2
    value = read_answer(result, refs)
    np.testing.assert_array_equal(value[0], arr * 2)
    np.testing.assert_array_equal(value[1], np.arange(100_000, dtype=np.int32))
    np.testing.assert_array_equal(value[2], np.arange(10) > 4)
    # Python dropped the blocks it opened: R's arena has them back.
    assert ask(r_session, "mizu:::arena_stats()[['blocks']]") == 0.0


def test_na_in_integer_and_logical_results_comes_back_masked(r_session):
    answer = ask(r_session, "list(c(1L, NA, 3L), c(TRUE, NA), matrix(c(NA, 2L, 3L, 4L), 2), NA, NA_real_, "
                            "c('a', NA))")
    assert_same(answer[0], np.ma.MaskedArray(np.array([1, 0, 3], np.int32), mask=[False, True, False]))
    assert_same(answer[1], np.ma.MaskedArray(np.array([True, False]), mask=[False, True]))
    expected = np.ma.MaskedArray(np.asfortranarray([[0, 3], [2, 4]], np.int32), mask=[[True, False], [False, False]])
    assert_same(answer[2], expected)
    assert answer[3] is None
    assert math.isnan(answer[4])
    assert answer[5] == ["a", None]


def test_results_without_na_read_with_mizus_own_decoder(r_session):
    data, refs = r_session.request("list(1:3, c(a = 2.5), list(k = 'v', n = NULL), matrix(c(TRUE, FALSE), 1), "
                                   "complex(real = 1, imaginary = 2), factor(c('u', 'v')), as.raw(1:2), "
                                   "structure(3L, units = 's'))",
                                   message(None)[0])
    assert refs == []
    value = decode(data)
    assert_same(value[:3], [np.array([1, 2, 3], np.int32), np.array([2.5]), {"k": "v", "n": None}])
    assert_same(value[3], np.array([[True, False]]))
    assert_same(value[4], np.array(1 + 2j))
    assert value[5] == ["u", "v"]
    assert_same(value[6], np.array([1, 2], np.uint8))
    # Any attribute makes a length-one vector an array, as names do.
    assert_same(value[7], np.array([3], np.int32))


@pytest.mark.parametrize("value, error", [
    (np.array([1, INT32_MIN], np.int32), "-2147483648, which R reads as NA_integer_; send a numpy.ma.MaskedArray"),
    (2**53 + 1, "the integer 9007199254740993 is beyond 2^53"),
    (np.array([-(2**53) - 1]), "the integer -9007199254740993 is beyond 2^53"),
    (np.array([2**63], np.uint64), "the integer 9223372036854775808 is beyond 2^53"),
    ("a\x00b", "a str holds a NUL character"),
])
def test_values_r_cannot_hold_are_refused_with_what_to_do(r_session, value, error):
    with pytest.raises(RError, match=re.escape(error)):
        ask(r_session, "x", value)


def test_an_int32_arena_array_holding_na_is_refused_and_its_block_released(r_session):
    arr = mizu.full(100, 7, np.int32)
    arr[50] = INT32_MIN
    block, _, _ = mizu.arena_block(arr)
    with pytest.raises(RError, match="NA_integer_"):
        ask(r_session, "x", arr)
    assert block.refs == 1


@pytest.mark.parametrize("code, error", [
    ("new.env()", 'class "environment"'),
    ("function(x) x", 'class "function"'),
    ("data.frame(a = 1:2, l = I(list(1, 2)))", 'column 2 of a data frame is of class "AsIs"'),
    ("list(a = 1, 2)", "element 2 of a list with names has an empty name"),
    ("list(a = 1, a = 2)", 'the name "a" appears twice'),
])
def test_r_values_python_cannot_read_are_errors_naming_them(r_session, code, error):
    with pytest.raises(RError, match=error):
        ask(r_session, code)


def test_views_release_their_blocks_when_r_collects_them(r_session):
    arr = mizu.zeros(10_000)
    block, _, _ = mizu.arena_block(arr)
    assert ask(r_session, "x[[1]] <- 1; sum(x)", arr) == 1.0
    assert block.refs == 2
    ask(r_session, "gc()")
    assert block.refs == 1


def test_registered_functions_take_python_arguments_and_return_error_records(r_session):
    arr = mizu.empty(101)
    arr[:] = np.arange(101.0)
    answer = ask(r_session, """
        f <- mizu:::register_function("function(x, p) quantile(x, p, names = FALSE)")$value
        list(ok = mizu:::call_function(f, x$args, x$kwargs), failed = mizu:::call_function(f, list("a"), x$kwargs))
        """, {"args": (arr,), "kwargs": {"p": np.array([0.25, 0.5])}})
    assert_same(answer["ok"]["value"], np.array([25.0, 50.0]))
    assert answer["ok"]["error"] is None
    error = answer["failed"]["error"]
    assert error["message"] == "non-numeric argument to binary operator"
    assert error["classes"] == ["simpleError", "error", "condition"]
    assert error["traceback"][:2] == ['FUN("a", p = c(0.25, 0.5))', "quantile(x, p, names = FALSE)"]
