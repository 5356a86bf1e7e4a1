"""pandas objects as the wire format's data frames and typed vectors.

A DataFrame travels as a frame record (``D`` in doc/dev/wire.rst) and a
Series as the vector a frame's column would be. `frame_parts` and
`column_part` say how each part is written, `frame_from_wire` and
`typed_from_wire` make pandas objects of what was read; the Cython codec
(mizu/_wire.pyx) does the reading and writing. Python workers take
pandas objects pickled: these are what R workers take, and their errors
speak of R. doc/user/r.rst has the table of what becomes what.

A part is a tuple: ``("a", ndarray)`` for a numpy array, ``("M", values,
mask)`` for an array with missing elements, ``("K", kind, items)`` for a
typed vector, whose items are written as values in turn.
"""

import datetime

import numpy

__all__ = ["column_part", "frame_from_wire", "frame_parts", "typed_from_wire"]

# Ticks per second of numpy's datetime64 and timedelta64 units.
_TICKS = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}
_UNITS = {ticks: unit for unit, ticks in _TICKS.items()}
_MISSING_TIME = numpy.iinfo(numpy.int64).min
_INT32_NA = numpy.iinfo(numpy.int32).min


def _pandas():
    """pandas, imported when a frame or Series is met (mizu does not require it)."""
    import pandas  # type: ignore[import-untyped, import-not-found, unused-ignore]

    return pandas


def _label(label):
    return label if isinstance(label, str) else str(label)


def frame_parts(df):
    """(nrows, row names part or None, [(column name, part)]) of a DataFrame."""
    pandas = _pandas()

    if isinstance(df.columns, pandas.MultiIndex):
        raise TypeError("a DataFrame with MultiIndex columns has no form in R: flatten its column labels first, "
                        "e.g. df.columns = ['_'.join(map(str, c)) for c in df.columns]")
    columns = [(_label(name), column_part(df.iloc[:, k], _label(name))) for k, name in enumerate(df.columns)]
    return len(df), _row_names(df.index), columns


def _row_names(index):
    pandas = _pandas()

    if isinstance(index, pandas.RangeIndex) and index.start == 0 and index.step == 1:
        return None
    advice = ("; send df.reset_index() to make it a column, or df.reset_index(drop=True) to leave it behind")
    if isinstance(index, pandas.MultiIndex):
        raise ValueError("a DataFrame's MultiIndex has no form as R's row names" + advice)
    if not index.is_unique:
        raise ValueError("a DataFrame's index has repeated labels, which R's row names cannot hold" + advice)
    if index.dtype.kind in "iu" and len(index) and (index.min() > _INT32_NA and index.max() <= 2**31 - 1):
        return ("a", numpy.asarray(index, dtype=numpy.int32))
    if index.dtype.kind in "iu" and not len(index):
        return ("a", numpy.zeros(0, numpy.int32))
    if index.dtype.kind in "OSUT" or isinstance(index.dtype, pandas.StringDtype):
        labels = index.to_numpy(dtype=object)
        if all(isinstance(v, str) for v in labels):
            return ("K", "s", [labels.tolist()])
    raise ValueError(f"a DataFrame's index of dtype {index.dtype} has no form as R's row names, which are "
                     f"unique str or int32" + advice)


def column_part(series, name=None):
    """The part a Series (or a frame's column, called name) is written as."""
    pandas = _pandas()

    where = "a Series" if name is None else f"column {name!r}"
    dtype = series.dtype
    if isinstance(dtype, pandas.CategoricalDtype):
        return _factor(series.array)
    if isinstance(dtype, pandas.DatetimeTZDtype):
        utc = series.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
        return _times("t", utc, zone=_zone_name(dtype.tz, where))
    if isinstance(dtype, pandas.StringDtype):
        return _strings(series)
    if isinstance(dtype, pandas.api.extensions.ExtensionDtype) and hasattr(series.array, "_mask"):
        # pandas' nullable integers, floats and booleans.
        values = series.array.to_numpy(dtype=dtype.numpy_dtype, na_value=0)
        return ("M", values, series.isna().to_numpy())
    if isinstance(dtype, numpy.dtype):
        if dtype.kind in "biufc":
            return ("a", series.to_numpy())
        if dtype.kind == "M":
            return _times("t", series.to_numpy(), zone="")
        if dtype.kind == "m":
            return _times("e", series.to_numpy())
        if dtype.kind == "O":
            return _objects(series, where)
    raise TypeError(f"{where} of dtype {dtype} has no form in R: send numbers, bool, str, Categorical, "
                    f"datetime64, timedelta64, datetime.date or pandas' nullable dtypes")


def _zone_name(tz, where):
    """The IANA name R knows tz by."""
    name = getattr(tz, "key", None) or getattr(tz, "zone", None)
    if isinstance(name, str):
        return name
    offset = tz.utcoffset(None) if isinstance(tz, datetime.timezone) else None
    if offset is not None and offset.total_seconds() % 3600 == 0:
        hours = int(offset.total_seconds() // 3600)
        # POSIX's signs are the other way round: Etc/GMT-2 is two hours east of UTC.
        return "UTC" if hours == 0 else f"Etc/GMT{-hours:+d}"
    raise ValueError(f"{where} is in the time zone {tz!r}, which has no name R knows: convert it to a zone of the "
                     f"IANA database (zoneinfo.ZoneInfo), or to UTC")


def _factor(categorical):
    levels = [_label(c) for c in categorical.categories]
    if len(set(levels)) != len(levels):
        raise ValueError("a Categorical's categories are not distinct as str, which R's factor levels must be")
    codes = numpy.asarray(categorical.codes, dtype=numpy.int32)
    return ("K", "o" if categorical.ordered else "c", [levels, codes])


def _times(kind, values, zone=None):
    unit, count = numpy.datetime_data(values.dtype)
    if unit not in _TICKS or count != 1:
        values = values.astype("M8[ns]" if kind == "t" else "m8[ns]")
        unit = "ns"
    ticks = values.view(numpy.int64)
    items = [_TICKS[unit], ticks] if zone is None else [zone, _TICKS[unit], ticks]
    return ("K", kind, items)


def _strings(series):
    values = series.to_numpy(dtype=object)
    missing = series.isna().to_numpy()
    if missing.any():
        values = values.copy()
        values[missing] = None
    return ("K", "s", [values.tolist()])


def _objects(series, where):
    values = series.to_numpy()
    present = values[~series.isna().to_numpy()]
    if all(isinstance(v, str) for v in present):
        return _strings(series)
    if all(isinstance(v, datetime.date) and not isinstance(v, datetime.datetime) for v in present):
        days = numpy.full(len(values), _MISSING_TIME, numpy.int64)
        days[~series.isna().to_numpy()] = numpy.array(present, dtype="datetime64[D]").view(numpy.int64)
        return ("K", "d", [days])
    odd = next(v for v in present if not isinstance(v, (str, datetime.date)) or isinstance(v, datetime.datetime))
    raise TypeError(f"{where} holds objects such as {odd!r} (of type {type(odd).__qualname__}), which have no "
                    f"form in R: an object column must hold only str, or only datetime.date, and missing values")


# -- from the wire --------------------------------------------------------------------------------


def typed_from_wire(kind, items):
    """The pandas (or numpy) vector a typed vector stands for."""
    pandas = _pandas()

    if kind in ("c", "o"):
        levels, codes = items
        levels = _levels(levels)
        if None in levels:
            # R's NA as a level (addNA(), exclude = NULL): pandas has no
            # missing category, so the values of that level are missing.
            kept = numpy.array([level is not None for level in levels])
            renumbered = numpy.where(kept, numpy.cumsum(kept) - 1, -1)
            codes = numpy.where(codes >= 0, renumbered[numpy.maximum(codes, 0)], -1)
            levels = [level for level in levels if level is not None]
        return pandas.Categorical.from_codes(codes, categories=levels, ordered=kind == "o")
    if kind == "s":
        out = numpy.empty(len(items[0]), object)
        out[:] = items[0]
        return _strings_array(out)
    if kind == "d":
        days = items[0]
        out = numpy.empty(len(days), object)
        present = days != _MISSING_TIME
        out[present] = days[present].astype("datetime64[D]").astype(object)
        return out
    ticks, values = items[-2], items[-1]
    unit = _UNITS.get(ticks)
    if unit is None:
        raise ValueError(f"a time vector counts {ticks} ticks a second, not one of numpy's units")
    if kind == "e":
        return values.view(f"m8[{unit}]")
    times = values.view(f"M8[{unit}]")
    zone = items[0]
    if not zone:
        return times
    utc = pandas.DatetimeIndex(times).tz_localize("UTC")
    try:
        return utc.tz_convert(_zone(zone)).array
    except (KeyError, ValueError):   # zoneinfo's and pytz's unknown zones are KeyErrors
        raise ValueError(f"an R time vector's zone {zone!r} is none that Python knows: give its \"tzone\" attribute "
                         "an IANA name such as \"Europe/Paris\" or \"UTC\"") from None


def _zone(name):
    """The time zone called name: pandas' own UTC, else zoneinfo's (pandas 3's default, also under pandas 2)."""
    if name == "UTC":
        return name
    import zoneinfo

    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return name


def _strings_array(values):
    """An object array of str and None in the dtype pandas gives strings: str from pandas 3 on, object before."""
    pandas = _pandas()

    if int(pandas.__version__.split(".")[0]) >= 3:
        return pandas.array(values, dtype="str")
    return values


def _levels(levels):
    return [] if levels is None else [levels] if isinstance(levels, str) else levels


def _column(value):
    """A column read from the wire as pandas takes it: masked arrays as nullable ones."""
    pandas = _pandas()

    if isinstance(value, numpy.ma.MaskedArray):
        data, mask = numpy.ma.getdata(value), numpy.ma.getmaskarray(value)
        if data.dtype.kind == "b":
            return pandas.arrays.BooleanArray(data, mask)
        if data.dtype.kind in "iu":
            return pandas.arrays.IntegerArray(data, mask)
        return pandas.arrays.FloatingArray(data, mask)
    return value


def frame_from_wire(nrows, row_names, names, columns):
    """The DataFrame a frame record stands for."""
    pandas = _pandas()

    for name, column in zip(names, columns):
        if numpy.ndim(column) != 1 or len(column) != nrows:
            raise ValueError(f"a data frame of {nrows} rows has a column {name!r} of shape {numpy.shape(column)}")
    if row_names is None:
        index = pandas.RangeIndex(nrows)
    elif len(row_names) != nrows:
        raise ValueError(f"a data frame of {nrows} rows has {len(row_names)} row names")
    elif isinstance(row_names, numpy.ndarray) and row_names.dtype.kind in "iu":
        index = pandas.Index(row_names.astype(numpy.int64))
    else:
        index = pandas.Index(_column(row_names))
    df = pandas.DataFrame({k: _column(c) for k, c in enumerate(columns)}, index=index, copy=False)
    df.columns = pandas.Index(names, dtype=object) if not names else pandas.Index(names)
    return df
