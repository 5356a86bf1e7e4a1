test_that("scalars without attributes travel as scalars and come back as length-one vectors", {
    for (value in list(TRUE, FALSE, 1L, -5L, 2.5, "text", "\u00e9t\u00e9", NULL)) {
        expect_identical(round_trip(value), value)
    }
    expect_identical(encode(NA)$message, wire(tag("N")))
    expect_identical(encode(NA_integer_)$message, wire(tag("N")))
    expect_identical(encode(NA_character_)$message, wire(tag("N")))
    expect_identical(encode(7L)$message, wire(tag("i"), u64(7)))
    # NA_real_ keeps its bits: numpy reads a NaN.
    expect_identical(encode(NA_real_)$message, wire(tag("d"), writeBin(NA_real_, raw(), endian = "little")))
    expect_identical(round_trip(NA_real_), NA_real_)
})

test_that("Python ints become integer when they fit and are not NA, else exact doubles", {
    int64 <- function(lo, hi) wire(tag("i"), u32(lo), u32(hi))
    expect_identical(decode(int64(5, 0)), 5L)
    expect_identical(decode(int64(0x7fffffff, 0)), .Machine$integer.max)
    # -2^31 is NA_integer_ in R, so it arrives as a double.
    expect_identical(decode(int64(0x80000000, 0xffffffff)), -2^31)
    expect_identical(decode(int64(0, 0x200000)), 2^53)
    expect_error(decode(int64(1, 0x200000)), "9007199254740993 is beyond 2\\^53")
})

test_that("vectors, matrices and arrays keep their type and dims", {
    values <- list(c(1.5, 2.5, NaN, Inf), 1:5, c(TRUE, FALSE, TRUE), as.raw(0:255),
                   complex(real = 1:3, imaginary = -1), matrix(1:6, 2), array(as.numeric(1:24), c(2, 3, 4)),
                   matrix(c(TRUE, FALSE), 1), numeric(0), integer(0), matrix(numeric(0), 0, 3), c("a", "b"))
    for (value in values) {
        back <- round_trip(value)
        if (is.character(value)) expect_identical(back, as.list(value)) else expect_identical(back, value)
    }
    expect_identical(round_trip(complex(real = 1, imaginary = 2)), complex(real = 1, imaginary = 2))
    expect_identical(round_trip(as.raw(7)), as.raw(7))
})

test_that("atomic vectors with attributes other than dim travel as arrays, their attributes dropped", {
    expect_identical(round_trip(c(a = 1)), 1)
    expect_identical(round_trip(structure(3L, units = "s")), 3L)
    expect_identical(round_trip(as.Date("2026-12-01")), as.numeric(as.Date("2026-12-01")))
})

test_that("character vectors other than plain scalars are lists of strings, with NULL for NA", {
    expect_identical(round_trip(c("x", NA, "\u65e5\u672c")), list("x", NULL, "\u65e5\u672c"))
    expect_identical(round_trip(character(0)), list())
    invalid <- rawToChar(as.raw(c(0x61, 0xff)))
    Encoding(invalid) <- "UTF-8"
    expect_error(encode(invalid), "not UTF-8")
})

test_that("factors travel as their character values", {
    expect_identical(round_trip(factor(c("b", "a", NA, "b"))), list("b", "a", NULL, "b"))
    expect_identical(round_trip(factor("z")), "z")
})

test_that("lists without names are lists, lists with names dicts, and ambiguous names an error", {
    value <- list(1L, list(a = 2, b = list()), NULL, "s")
    expect_identical(round_trip(value), value)
    expect_identical(round_trip(setNames(list(), character(0))), setNames(list(), character(0)))
    expect_identical(encode(setNames(list(), character(0)))$message, wire(tag("m"), u32(0)))
    expect_identical(encode(list())$message, wire(tag("l"), u32(0)))
    expect_error(encode(list(a = 1, 2)), "element 2 of a list with names has an empty name")
    expect_error(encode(setNames(list(1, 2), c("a", NA))), "element 2 .* has NA")
    expect_error(encode(list(a = 1, a = 2)), "the name \"a\" appears twice")
    expect_identical(round_trip(structure(list(x = 1), class = "myclass")), list(x = 1))
})

test_that("values with no wire form are errors naming their class", {
    expect_error(encode(new.env()), "class \"environment\"")
    expect_error(encode(function(x) x), "class \"function\"")
    expect_error(encode(sum), "class \"function\"")
    expect_error(encode(quote(f(x))), "class \"call\"")
    expect_error(encode(list(1, list(quote(x)))), "class \"name\"")
    methods::setClass("mizuTestPoint", methods::representation(x = "numeric"), where = globalenv())
    expect_error(encode(methods::new("mizuTestPoint", x = 1)), "class \"mizuTestPoint\"")
})

test_that("lists nest at most 64 deep", {
    deep <- function(n) if (n == 0) list() else list(deep(n - 1))
    expect_identical(round_trip(deep(63)), deep(63))
    expect_error(encode(deep(64)), "more than 64 deep")
})

test_that("integer and logical vectors with NA are written as masked arrays", {
    message <- encode(c(1L, NA, 3L))$message
    mask <- inline_array("|b1", 3, 1, as.raw(c(0, 1, 0)))
    values <- inline_array("<i4", 3, 4, c(u32(1), u32(0), u32(3)))
    expect_identical(message, wire(tag("M"), values, mask))
    message <- encode(matrix(c(TRUE, NA), 1))$message
    expect_identical(message, wire(tag("M"), inline_array("|b1", c(1, 2), c(1, 1), as.raw(c(1, 0))),
                                   inline_array("|b1", c(1, 2), c(1, 1), as.raw(c(0, 1)))))
})

test_that("inline arrays of every numpy type become the R vectors of the mapping", {
    le <- function(values, what, size) writeBin(values, raw(), size = size, endian = "little")
    expect_identical(decode(wire(inline_array("<f8", 2, 8, le(c(1.5, -2), "double", 8)))), c(1.5, -2))
    expect_identical(decode(wire(inline_array("<f4", 2, 4, le(c(1.5, -2), "double", 4)))), c(1.5, -2))
    expect_identical(decode(wire(inline_array("<f2", 3, 2, as.raw(c(0x00, 0x3c, 0x00, 0xc0, 0x00, 0x7c))))),
                     c(1, -2, Inf))
    expect_identical(decode(wire(inline_array(">f8", 1, 8, writeBin(0.25, raw(), endian = "big")))), 0.25)
    expect_identical(decode(wire(inline_array("|i1", 2, 1, as.raw(c(0xff, 0x7f))))), c(-1L, 127L))
    expect_identical(decode(wire(inline_array("<i2", 1, 2, as.raw(c(0x00, 0x80))))), -32768L)
    expect_identical(decode(wire(inline_array("<u2", 1, 2, as.raw(c(0xff, 0xff))))), 65535L)
    expect_identical(decode(wire(inline_array("<u4", 1, 4, as.raw(c(0xff, 0xff, 0xff, 0xff))))), 2^32 - 1)
    expect_identical(decode(wire(inline_array("<i8", 1, 8, c(u32(0), u32(0xffe00000))))), -2^53)
    expect_error(decode(wire(inline_array("<i8", 1, 8, c(u32(1), u32(0x00200000))))), "beyond 2\\^53")
    expect_error(decode(wire(inline_array("<u8", 1, 8, c(u32(1), u32(0x00200000))))), "beyond 2\\^53")
    expect_identical(decode(wire(inline_array("|b1", 3, 1, as.raw(c(0, 2, 1))))), c(FALSE, TRUE, TRUE))
    expect_identical(decode(wire(inline_array("|u1", 2, 1, as.raw(c(9, 250))))), as.raw(c(9, 250)))
    expect_identical(decode(wire(inline_array("<c8", 1, 8, le(c(1, -1), "double", 4)))), complex(real = 1, imaginary = -1))
    expect_error(decode(wire(inline_array("<i4", 2, 4, c(u32(1), u32(0x80000000))))),
                 "-2147483648, which R reads as NA_integer_.*masked")
})

test_that("C-ordered and strided arrays are copied so that x[i, j] is Python's a[i, j]", {
    # a = [[1, 2, 3], [4, 5, 6]] in C order: strides (12, 4).
    data <- unlist(lapply(1:6, u32))
    expect_identical(decode(wire(inline_array("<i4", c(2, 3), c(12, 4), data))), matrix(1:6, 2, byrow = TRUE))
    # a = arange(24).reshape(2, 3, 4) in C order, and a broadcast row.
    data <- unlist(lapply(0:23, u32))
    expect_identical(decode(wire(inline_array("<i4", c(2, 3, 4), c(48, 16, 4), data))),
                     aperm(array(0:23, c(4, 3, 2)), 3:1))
    expect_identical(decode(wire(inline_array("<i4", c(2, 2), c(0, 4), data[1:16]))), matrix(c(0L, 0L, 1L, 1L), 2))
    # A 0-d array is a length-one vector.
    expect_identical(decode(wire(inline_array("<i4", integer(0), integer(0), u32(9)))), 9L)
})

test_that("a decoded str may not hold NUL, and pickles are refused", {
    expect_error(decode(wire(tag("s"), u64(3), charToRaw("a"), as.raw(0), charToRaw("b"))), "NUL character")
    expect_error(decode(wire(tag("P"), u32(0), u64(1), as.raw(0x80))), "pickled Python object")
    expect_error(decode(wire(tag("N"), tag("N"))), "1 bytes left after the value")
    expect_error(decode(as.raw(1:3)), "wire magic")
})

test_that("a data frame record becomes a data.frame with compact row names", {
    column <- function(name, typestr, data) c(u64(nchar(name)), charToRaw(name), inline_array(typestr, 2, 8, data))
    df <- decode(wire(tag("D"), u32(2), u64(2), tag("N"),
                      column("a", "<f8", writeBin(c(1, 2), raw(), endian = "little")),
                      column("b", "<i8", c(u64(3), u64(4)))))
    b <- if (requireNamespace("bit64", quietly = TRUE)) bit64::as.integer64(c(3, 4)) else c(3, 4)
    expect_identical(df, data.frame(a = c(1, 2), b = b))
    expect_identical(.row_names_info(df, 0L), c(NA_integer_, -2L))
})

test_that("data frames round-trip with their column classes, NA and row names", {
    df <- data.frame(n = c(1.5, NA, NaN), i = c(1L, NA, 3L), l = c(TRUE, NA, FALSE), s = c("a", NA, "\u00e9"),
                     f = factor(c("x", NA, "y")), o = factor(c("lo", "hi", NA), levels = c("lo", "hi"), ordered = TRUE),
                     d = as.Date(c("2020-02-29", NA, "1969-12-31")),
                     t = as.POSIXct(c("2020-01-01 10:00:00", NA, "1970-01-01 00:00:00"), tz = "Europe/Paris"),
                     e = as.difftime(c(1.5, NA, 0), units = "secs"), stringsAsFactors = FALSE)
    back <- round_trip(df)
    expect_identical(lapply(back, class), lapply(df, class))
    expect_identical(lapply(back, is.na), lapply(df, is.na))
    expect_true(is.nan(back$n[3]) && is.na(back$n[2]) && !is.nan(back$n[2]))
    expect_identical(back$s, df$s)
    expect_identical(back$f, df$f)
    expect_identical(back$o, df$o)
    expect_identical(back$d, df$d)
    expect_equal(as.numeric(back$t), as.numeric(df$t))
    expect_identical(attr(back$t, "tzone"), "Europe/Paris")
    expect_identical(as.numeric(back$e), as.numeric(df$e))
    named <- data.frame(x = 1:2, row.names = c("r1", "r2"))
    expect_identical(round_trip(named), named)
    expect_identical(round_trip(data.frame()), data.frame())
    expect_error(round_trip(data.frame(a = 1:2, m = I(list(1, 2)))), "column 2 of a data frame is of class")
})
