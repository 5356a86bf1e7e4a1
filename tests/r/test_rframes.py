"""pandas DataFrames and R data.frames between Python and R workers.

Every test runs real R workers over the pool's shared memory. The oracles
are R itself (identical() against the data sets R ships, and a fresh
Rscript computing the same summaries) and the frame Python sent, which a
round trip must give back equal (pandas.testing.assert_frame_equal) by
the rules of doc/user/r.rst, "Data frames".
"""

import datetime
import json
import zoneinfo

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import mizu
from rsession import run_rscript

INT32_MIN = -(2**31)


@pytest.fixture(scope="module")
def r(r_library):
    with mizu.RExecutor(1) as pool:
        yield pool


IDENTITY = "function(df) df"


# -- frames of every supported dtype, generated ----------------------------------------------

_PARIS = zoneinfo.ZoneInfo("Europe/Paris")
# Times within a few centuries of 1970, in microseconds, as R's doubles hold them exactly.
_MICROS = st.integers(-(2**52), 2**52)


def _with_missing(draw, values, missing):
    """values with a drawn set of positions (at least one if there are rows) replaced by `missing`."""
    n = len(values)
    if not n:
        return values
    holes = draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n))
    out = list(values)
    for k in holes:
        out[k] = missing
    return out


@st.composite
def columns(draw, n):
    kind = draw(st.sampled_from([
        "float64", "int32", "int64", "bool", "category", "ordered", "datetime", "datetime-utc", "datetime-paris",
        "timedelta", "str", "date", "Int32", "Int64", "Float64", "boolean", "complex",
    ]))
    missing = draw(st.booleans())
    if kind == "float64":
        values = draw(st.lists(st.floats(allow_nan=True, width=64), min_size=n, max_size=n))
        return pd.Series(values, dtype=np.float64)
    if kind == "complex":
        values = draw(st.lists(st.complex_numbers(allow_nan=False, allow_infinity=False), min_size=n, max_size=n))
        return pd.Series(values, dtype=np.complex128)
    if kind == "int32":
        return pd.Series(draw(st.lists(st.integers(INT32_MIN + 1, 2**31 - 1), min_size=n, max_size=n)),
                         dtype=np.int32)
    if kind == "int64":
        return pd.Series(draw(st.lists(st.integers(-(2**63) + 1, 2**63 - 1), min_size=n, max_size=n)),
                         dtype=np.int64)
    if kind == "bool":
        return pd.Series(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    if kind in ("category", "ordered"):
        levels = draw(st.lists(st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"), max_size=5),
                               min_size=1, max_size=6, unique=True))
        codes = draw(st.lists(st.integers(-1 if missing else 0, len(levels) - 1), min_size=n, max_size=n))
        return pd.Series(pd.Categorical.from_codes(codes, categories=levels, ordered=kind == "ordered"))
    if kind.startswith("datetime"):
        ticks = draw(st.lists(_MICROS, min_size=n, max_size=n))
        times = np.array(ticks, dtype="M8[us]")
        if missing and n:
            times[draw(st.integers(0, n - 1))] = np.datetime64("NaT", "us")
        s = pd.Series(times)
        if kind == "datetime-utc":
            return s.dt.tz_localize("UTC")
        if kind == "datetime-paris":
            return s.dt.tz_localize("UTC").dt.tz_convert(_PARIS)
        return s
    if kind == "timedelta":
        spans = np.array(draw(st.lists(_MICROS, min_size=n, max_size=n)), dtype="m8[us]")
        if missing and n:
            spans[draw(st.integers(0, n - 1))] = np.timedelta64("NaT", "us")
        return pd.Series(spans)
    if kind == "str" or (kind == "date" and not n):
        text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"), max_size=8)
        values = draw(st.lists(text, min_size=n, max_size=n))
        return pd.Series(_with_missing(draw, values, None) if missing else values, dtype="str")
    if kind == "date" and n:
        # (An object column without rows, or with nothing but missing values, is a character vector.)
        days = draw(st.lists(st.integers(-700_000, 2_000_000), min_size=n, max_size=n))
        values = [datetime.date(1970, 1, 1) + datetime.timedelta(days=d) for d in days]
        if missing and n > 1:
            for k in draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n - 1)):
                values[k] = None
        return pd.Series(values, dtype=object)
    # pandas' nullable dtypes, which come back as themselves when they hold a missing value.
    element = {"Int32": st.integers(INT32_MIN + 1, 2**31 - 1), "Int64": st.integers(-(2**63) + 1, 2**63 - 1),
               "Float64": st.floats(allow_nan=False), "boolean": st.booleans()}[kind]
    if not n:
        return pd.Series([], dtype={"Int32": np.int32, "Int64": np.int64, "Float64": np.float64, "boolean": bool}[kind])
    values = draw(st.lists(element, min_size=n, max_size=n))
    return pd.Series(pd.array(_with_missing(draw, values, None), dtype=kind))


@st.composite
def frames(draw):
    n = draw(st.integers(0, 12))
    ncols = draw(st.integers(0, 6))
    names = draw(st.lists(st.sampled_from(["x", "", "é", "x", "日本", "a b", "NA"]), min_size=ncols, max_size=ncols))
    df = pd.DataFrame({k: draw(columns(n)) for k in range(ncols)}, index=pd.RangeIndex(n))
    df.columns = pd.Index(names, dtype="str")
    index = draw(st.sampled_from(["range", "str", "int"]))
    if index == "str":
        df.index = pd.Index(draw(st.lists(st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"),
                                                          min_size=1, max_size=4), min_size=n, max_size=n, unique=True)),
                            dtype="str")
    elif index == "int":
        labels = draw(st.lists(st.integers(INT32_MIN + 1, 2**31 - 1), min_size=n, max_size=n, unique=True))
        # (R takes the row names 1, ..., n for its own numbering, which comes back as a RangeIndex.)
        assume(labels != list(range(1, n + 1)))
        df.index = pd.Index(labels, dtype=np.int64)
    return df


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(df=frames())
def test_a_frame_of_every_dtype_round_trips_through_r(r, bit64, df):
    back = r.submit(IDENTITY, df).result()
    pd.testing.assert_frame_equal(back, df, check_column_type=False)


def test_r_sees_each_dtype_as_the_r_class_the_table_gives(r, bit64):
    df = pd.DataFrame({
        "f": [1.5, np.nan], "i": np.array([1, 2], np.int32), "j": np.array([2**60, 3]), "b": [True, False],
        "c": pd.Categorical(["u", "v"]), "o": pd.Categorical(["u", "v"], ordered=True),
        "t": pd.to_datetime(["2020-01-01 10:00:00.25", None]),
        "z": pd.to_datetime(["2020-01-01", "2021-06-01"]).tz_localize("Europe/Paris"),
        "d": [datetime.date(2020, 1, 2), None], "e": pd.to_timedelta([1.5, None], unit="s"),
        "s": ["x", None], "I": pd.array([1, None], dtype="Int32"), "F": pd.array([None, 2.5], dtype="Float64"),
        "B": pd.array([None, True], dtype="boolean"),
    })
    got = r.submit("""function(df) lapply(df, function(col) list(class = paste(class(col), collapse = " "),
        na = paste(is.na(col), collapse = " "), tz = if (is.null(attr(col, "tzone"))) "" else attr(col, "tzone"),
        text = paste(format(col), collapse = "|")))""", df).result()
    classes = {name: got[name]["class"] for name in df.columns}
    assert classes == {
        "f": "numeric", "i": "integer", "j": "integer64", "b": "logical", "c": "factor", "o": "ordered factor",
        "t": "POSIXct POSIXt", "z": "POSIXct POSIXt", "d": "Date", "e": "difftime", "s": "character",
        "I": "integer", "F": "numeric", "B": "logical"}
    assert got["z"]["tz"] == "Europe/Paris" and got["t"]["tz"] == ""
    assert got["z"]["text"] == "2020-01-01|2021-06-01"
    assert got["d"]["text"].startswith("2020-01-02|")
    assert got["j"]["text"].split("|")[0].strip() == str(2**60)
    assert {name: got[name]["na"] for name in "ftdesIFB"} == {
        **{name: "FALSE TRUE" for name in "ftdesI"}, "F": "TRUE FALSE", "B": "TRUE FALSE"}


def test_nullable_columns_without_missing_values_come_back_as_numpy_dtypes(r):
    df = pd.DataFrame({"I": pd.array([1, 2], dtype="Int32"), "B": pd.array([True, False], dtype="boolean"),
                       "F": pd.array([0.5, 1.0], dtype="Float64")})
    back = r.submit(IDENTITY, df).result()
    assert back.dtypes.tolist() == [np.dtype(np.int32), np.dtype(bool), np.dtype(np.float64)]
    pd.testing.assert_frame_equal(back, df, check_dtype=False)


def test_r_made_columns_reach_pandas_as_the_inverse_mapping(r):
    back = r.submit("""function() data.frame(
        n = c(1.5, NA, NaN), i = c(1L, NA, 3L), l = c(TRUE, NA, FALSE), s = c("a", NA, "c"),
        f = factor(c("lo", NA, "hi"), levels = c("lo", "hi")),
        t = as.POSIXct(c("2020-01-01 12:00:00", NA, "2020-01-02 00:00:00"), tz = "UTC"),
        d = as.Date(c("2020-01-01", NA, "1969-12-31")), e = as.difftime(c(1, NA, 2), units = "mins"),
        stringsAsFactors = FALSE)""").result()
    strings = str(pd.Series(["a"]).dtype)  # str from pandas 3 on, object before
    assert back.dtypes.astype(str).tolist() == ["Float64", "Int32", "boolean", strings, "category",
                                               "datetime64[us, UTC]", "object", "timedelta64[us]"]
    assert back["n"].isna().tolist() == [False, True, False] and np.isnan(back["n"].array[2])
    assert back["f"].cat.categories.tolist() == ["lo", "hi"] and back["f"].isna().tolist() == [False, True, False]
    assert back["d"].tolist() == [datetime.date(2020, 1, 1), None, datetime.date(1969, 12, 31)]
    assert back["e"].tolist()[0] == pd.Timedelta(minutes=1) and back["e"].isna().tolist()[1]
    assert back["t"].iloc[0] == pd.Timestamp("2020-01-01 12:00", tz="UTC")
    assert isinstance(back.index, pd.RangeIndex)


def test_a_factor_with_an_na_level_reads_its_values_as_missing_as_r_prints_them(r, r_library):
    source = "addNA(factor(c('lo', NA, 'hi', NA), levels = c('lo', 'hi')))"
    back = r.submit(f"function() data.frame(f = {source})").result()
    lines = run_rscript(r_library, f"x <- as.character({source}); cat(ifelse(is.na(x), '<NA>', x), sep = '\\n')")
    printed = [None if line == "<NA>" else line for line in lines.split()]
    assert back["f"].cat.categories.tolist() == ["lo", "hi"]
    assert back["f"].astype(object).where(back["f"].notna(), None).tolist() == printed == ["lo", None, "hi", None]


def test_a_result_pandas_cannot_hold_fails_its_task_and_the_pool_goes_on(r):
    with pytest.raises(ValueError, match="zone 'GMT\\+1' is none that Python knows.*IANA name"):
        r.submit("function() data.frame(t = as.POSIXct('2020-06-01 12:00', tz = 'GMT+1'))").result()
    with pytest.raises(ValueError, match="categories must be unique"):
        r.submit("function() data.frame(f = structure(1:2, levels = c('a', 'a'), class = 'factor'))").result()
    assert r.submit("function() 1 + 1").result() == 2


def test_row_names_and_the_index(r):
    df = pd.DataFrame({"x": [1.0, 2.0]}, index=pd.Index(["a", "b"], dtype="str"))
    assert r.submit("function(df) rownames(df)", df).result() == ["a", "b"]
    filtered = pd.DataFrame({"x": np.arange(6.0)})[lambda d: d.x % 2 == 1]
    assert r.submit("function(df) attr(df, 'row.names')", filtered).result().tolist() == [1, 3, 5]
    back = r.submit("function(df) df[df$x > 1, , drop = FALSE]", filtered).result()
    assert back.index.tolist() == [3, 5]
    with pytest.raises(ValueError, match="repeated labels.*reset_index"):
        r.submit(IDENTITY, pd.DataFrame({"x": [1, 2]}, index=[0, 0])).result()
    with pytest.raises(ValueError, match="MultiIndex"):
        r.submit(IDENTITY, pd.DataFrame({"x": [1, 2]}, index=pd.MultiIndex.from_tuples([(0, 1), (1, 1)]))).result()


def test_columns_r_cannot_hold_are_named(r):
    with pytest.raises(TypeError, match="column 'o' holds objects such as"):
        r.submit(IDENTITY, pd.DataFrame({"o": [1, "a"]})).result()
    with pytest.raises(TypeError, match="column 'p' of dtype period"):
        r.submit(IDENTITY, pd.DataFrame({"p": pd.period_range("2020", periods=2)})).result()
    with pytest.raises(TypeError, match="column 2 of a data frame is of class \"list\""):
        r.submit("function() { d <- data.frame(a = 1:2); d$l <- list(1, 2); d }").result()
    with pytest.raises(TypeError, match="column 1 of a data frame is a matrix"):
        r.submit("function() { d <- data.frame(a = 1:2); d$a <- matrix(1:4, 2); d }").result()


def test_empty_frames_and_wide_frames(r):
    for df in (pd.DataFrame(), pd.DataFrame({"a": pd.Series([], dtype=np.float64), "b": pd.Series([], dtype="str")}),
               pd.DataFrame(index=pd.RangeIndex(3))):
        back = r.submit(IDENTITY, df).result()
        assert back.shape == df.shape and r.submit("function(df) dim(df)", df).result().tolist() == list(df.shape)
    wide = pd.DataFrame(np.arange(3000.0).reshape(3, 1000), columns=[f"c{k}" for k in range(1000)])
    pd.testing.assert_frame_equal(r.submit(IDENTITY, wide).result(), wide, check_column_type=False)
    assert r.submit("function(df) sum(sapply(df, sum))", wide).result() == wide.to_numpy().sum()


def test_series_become_vectors(r):
    assert r.submit("function(x) class(x)", pd.Series(pd.Categorical(["a", "b"]))).result() == "factor"
    assert r.submit("function(x) levels(x)", pd.Series(pd.Categorical(["a", "b"]))).result() == ["a", "b"]
    assert r.submit("function(x) class(x)[1]", pd.Series(pd.to_datetime(["2020-01-01"]))).result() == "POSIXct"
    assert r.submit("function(x) x", pd.Series([1.5, 2.5])).result().tolist() == [1.5, 2.5]


def _rss_anon_kb(pid):
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssAnon:"))


def test_frame_columns_in_the_arena_cross_both_ways_without_a_copy(r):
    n = 1_000_000
    a, b = mizu.empty(n), mizu.empty(n, dtype=np.int32)
    a[:], b[:] = np.arange(n) * 0.5, np.arange(n, dtype=np.int32)
    df = pd.DataFrame({"a": a, "b": b}, copy=False)
    pid = r.submit("function() { gc(); Sys.getpid() }").result()
    before = _rss_anon_kb(pid)
    # The 12 MB of columns are read through the shared pages: R's private memory does not grow by them.
    read = r.submit("function(df) { s <- c(sum(df$a), sum(df$b)); gc(); s }", df).result()
    assert read.tolist() == [a.sum(), float(b.astype(np.int64).sum())] and _rss_anon_kb(pid) - before < 4096
    got = r.submit("function(df) c(colMeans(df), vapply(df, function(col) !is.null(mizu:::view_info(col)), TRUE))",
                   df).result()
    assert got.tolist() == [a.mean(), b.mean(), 1, 1]
    back = r.submit(IDENTITY, df).result()
    assert np.shares_memory(back["a"].to_numpy(), a) and np.shares_memory(back["b"].to_numpy(), b)
    changed = r.submit("function(df) { df$a[1] <- -1; df }", df).result()
    assert changed["a"][0] == -1 and a[0] == 0 and not np.shares_memory(changed["a"].to_numpy(), a)
    # A column whose bytes are not 8-byte aligned in their block is a view as well.
    odd = mizu.empty(n + 1, dtype=np.int32)[1:]
    odd[:] = b
    got = r.submit("function(df) c(sum(as.numeric(df$o)), !is.null(mizu:::view_info(df$o)))",
                   pd.DataFrame({"o": odd}, copy=False)).result()
    assert got.tolist() == [float(b.astype(np.int64).sum()), 1]
    block = mizu.arena_block(b)[0]
    del back, changed
    b[5] = INT32_MIN
    with pytest.raises(ValueError, match="-2147483648"):
        r.submit(IDENTITY, df).result()
    r.submit("function() gc()").result()
    assert block.refs == 1


# What R computes on a frame of shared-memory columns (views), against the same frame of R's own
# vectors in a fresh Rscript: reads through R's data frame code, NA checks, bit64, and a write.
VIEW_SUMMARY = """function(df) {
    w <- df
    w$i[1] <- NA
    w$a[2] <- -1
    list(means = unname(colMeans(df[c("a", "i")])), counts = as.vector(table(df$i %% 7L)),
         quantiles = unname(quantile(df$a, c(0.1, 0.5, 0.9))), cells = as.vector(as.matrix(df[1:3, c("a", "i")])),
         no_na = c(anyNA(df$a), anyNA(df$i), anyNA(df$j)), integer64 = as.character(c(sum(df$j), max(df$j))),
         written = c(sum(is.na(w$i)), sum(w$i, na.rm = TRUE), sum(w$a), anyNA(w$i), identical(df$i[1], 0L)))
}"""


def test_r_computes_on_frame_columns_in_the_arena_as_on_its_own_vectors(r, r_library, bit64):
    n = 200_000
    a, i, j = mizu.empty(n), mizu.empty(n, dtype=np.int32), mizu.empty(n, dtype=np.int64)
    a[:], i[:], j[:] = np.arange(n) * 0.25 - 1e5, np.arange(n) % 1000, np.arange(n) * 40_000_003
    got = r.submit(VIEW_SUMMARY, pd.DataFrame({"a": a, "i": i, "j": j}, copy=False)).result()
    want = json.loads(run_rscript(r_library, f"""
        n <- {n}
        df <- data.frame(a = (0:(n - 1)) * 0.25 - 1e5, i = (0:(n - 1)) %% 1000L,
                         j = bit64::as.integer64(0:(n - 1)) * bit64::as.integer64(40000003L))
        s <- ({VIEW_SUMMARY})(df)
        cat(paste0("{{", paste(sprintf('"%s": [%s]', names(s), vapply(s, function(v)
            paste(if (is.character(v)) sprintf('"%s"', v) else sprintf("%.17g", as.numeric(v)), collapse = ","), "")),
            collapse = ","), "}}"))"""))
    assert set(got) == set(want)
    for key, values in want.items():
        assert np.asarray(got[key]).astype(object if key == "integer64" else float).tolist() == values, key
    assert (a[1], i[0]) == (-1e5 + 0.25, 0)


# -- the data sets R ships, against Rscript ------------------------------------------------------

DATASETS = ["iris", "mtcars", "airquality", "ChickWeight"]
SUMMARY = """function(df) {
    num <- vapply(df, function(col) is.numeric(col) && !is.factor(col), TRUE)
    fac <- vapply(df, is.factor, TRUE)
    c(list(means = unname(colMeans(df[num], na.rm = TRUE)), nas = unname(colSums(is.na(df))),
           rows = rownames(df)),
      lapply(df[fac], function(f) unname(as.vector(table(f)))))
}"""


@pytest.mark.parametrize("name", DATASETS)
def test_r_data_sets_arrive_whole_and_go_back_identical(r, r_library, name):
    df = r.submit(f"function() as.data.frame(datasets::{name})").result()
    # ChickWeight is also a groupedData, whose formula and labels a pandas frame does not keep.
    same = r.submit(f"""function(df) {{ ref <- as.data.frame(datasets::{name})
        identical(names(df), names(ref)) && all(mapply(identical, df, ref)) &&
            identical(attr(df, "row.names"), attr(ref, "row.names")) }}""",
                    df).result()
    assert same is True
    got = r.submit(SUMMARY, df).result()
    want = json.loads(run_rscript(r_library, f"""
        s <- ({SUMMARY})(as.data.frame(datasets::{name}))
        cat(paste0("{{", paste(sprintf('"%s": [%s]', names(s), vapply(s, function(v)
            paste(if (is.character(v)) sprintf('"%s"', v) else sprintf("%.17g", v), collapse = ","), "")),
            collapse = ","), "}}"))"""))
    assert set(got) == set(want)
    for key, values in want.items():
        mine = got[key]
        mine = [mine] if np.ndim(mine) == 0 else list(np.asarray(mine).tolist())
        assert mine == values, key
    if name == "ChickWeight":
        assert df["Diet"].dtype == "category" and df["Chick"].cat.ordered
    if name == "airquality":
        assert df["Ozone"].dtype == "Int32" and df["Ozone"].isna().sum() == 37
    if name == "mtcars":
        assert df.index[0] == "Mazda RX4"
