# An array above the inline limit goes to this process's arena; decoding the
# message adopts the block reference encode() took and views the block.
big_view <- function(value) {
    encoded <- encode(value, inline_limit = 0)
    decode(encoded$message, encoded$records, encoded$fds)
}

counted <- function(expr) {
    view_counters(reset = TRUE)
    force(expr)
    view_counters(reset = TRUE)
}

test_that("arena arrays of R's layout over 64 KiB decode as views, others as ordinary vectors", {
    for (value in list(runif(1e4), seq_len(2e4), as.raw(rep(0:255, 300)), complex(real = seq_len(5000)),
                       matrix(runif(1e4), 100))) {
        v <- big_view(value)
        expect_identical(v, value)
        expect_false(is.null(view_info(v)))
    }
    expect_null(view_info(big_view(c(TRUE, FALSE))))
    expect_null(view_info(big_view(runif(8192))))
    expect_identical(big_view(runif(8192, 0, 0)), double(8192))
})

test_that("reading a view copies nothing", {
    x <- runif(1e5)
    v <- big_view(x)
    m <- big_view(matrix(x, 100))
    for (f in list(sum, mean, max, min, range, function(v) v * 2, function(v) v[v > 0.5], var)) {
        expect_identical(f(v), f(x))
    }
    expect_identical(colMeans(m), colMeans(matrix(x, 100)))
    counts <- counted({sum(v); v * 2; max(v); range(v); mean(v); colMeans(m); v[10:1]})
    expect_equal(counts[["copies"]] + counts[["remaps"]], 0)
    # range() asks for a pointer it may write through, and only reads.
    expect_gt(counts[["writable_pointers"]], 0)
    expect_false(view_info(v)$written)
    # The others read the block's shared pages: no view maps its own.
    counts <- counted({sum(v); v * 2; max(v); mean(v); colMeans(m); v[10:1]; v[v > 0.5]})
    expect_equal(counts[["private_mappings"]], 0)
    expect_identical(sum(v), sum(x))
})

test_that("subsetting a view selects what R's subsetting would", {
    x <- runif(1e4)
    v <- big_view(x)
    for (index in list(3:1, c(1, NA, 30), c(0.5, 2.9, 20.1), -1, 0, c(TRUE, FALSE), integer(0))) {
        expect_identical(v[index], x[index])
    }
    expect_identical(big_view(as.raw(rep(1:3, 3e4)))[c(1, 9e4 + 2)], as.raw(c(1, 0)))
    expect_identical(big_view(complex(real = rep(1, 5000)))[5001], NA_complex_)
})

test_that("writing to a view changes that view alone, in place; a shared view is duplicated first", {
    x <- runif(1e4)
    v <- big_view(x)
    counts <- counted(v[1] <- 0)
    expect_equal(counts[["copies"]] + counts[["remaps"]], 0)
    expect_true(view_info(v)$written)
    expect_identical(v[[1]], 0)
    expect_identical(v[-1], x[-1])
    # Never written to, a shared view is duplicated as a new view of its block.
    w <- big_view(x)
    y <- w
    counts <- counted(y[2] <- 0)
    expect_equal(counts[["remaps"]], 1)
    expect_equal(counts[["copies"]], 0)
    expect_identical(w, x)
    expect_identical(y, replace(x, 2, 0))
    expect_false(is.null(view_info(y)))
    # The first write maps the view's pages privately, once; reads see it.
    u <- big_view(x)
    twin <- big_view(x)
    counts <- counted({u[5000] <- 1e9; u[6000] <- -1})
    expect_equal(counts[["private_mappings"]], 1)
    expect_identical(c(max(u), min(u), sum(u)), c(1e9, -1, sum(replace(x, c(5000, 6000), c(1e9, -1)))))
    expect_identical(u[6000:4999], replace(x, c(5000, 6000), c(1e9, -1))[6000:4999])
    expect_identical(twin, x)
    # R reuses an unshared argument as its result: that writes privately too.
    expect_identical(list(-big_view(x), sqrt(big_view(x)), big_view(x) + 1), list(-x, sqrt(x), x + 1))
    for (value in list(c(seq_len(2e4), NA), rep(c(TRUE, NA), 2e4), as.raw(rep(1:3, 3e4)),
                       complex(real = seq_len(5000)))) {
        a <- big_view(value)
        b <- big_view(value)
        a[2] <- a[1]
        expect_identical(b, value)
    }
    # Written to, it is copied: a new view would show the block's bytes.
    z <- v
    counts <- counted(z[3] <- 0)
    expect_equal(counts[["copies"]], 1)
    expect_identical(z, replace(x, c(1, 3), 0))
    expect_identical(v, replace(x, 1, 0))
    expect_null(view_info(z))
})

test_that("setting attributes on a shared view copies no bytes, even after R read it", {
    x <- runif(1e4)
    v <- big_view(x)
    range(v)
    m <- v
    counts <- counted({dim(m) <- c(100L, 100L); colSums(m)})
    expect_equal(counts[["copies"]], 0)
    expect_identical(m, matrix(x, 100))
    expect_identical(colSums(m), colSums(matrix(x, 100)))
})

test_that("a view's block goes back to the arena once R collects the view", {
    gc()
    before <- arena_stats()[["blocks"]]
    v <- big_view(runif(1e4))
    expect_equal(arena_stats()[["blocks"]], before + 1)
    rm(v)
    gc()
    expect_equal(arena_stats()[["blocks"]], before)
})

test_that("a block reference is adopted once", {
    # Keeps the arena's segment mapped here, so that block_view needs no descriptor.
    kept <- big_view(runif(1e4))
    encoded <- encode(runif(1e4), inline_limit = 0)
    v <- decode(encoded$message, encoded$records, encoded$fds)
    expect_error(decode(encoded$message), "an array in out-of-band buffer 0 of a message with 0")
    info <- view_info(v)
    rm(v)
    gc()
    expect_error(block_view(NA, info$arena_id, info$block[["segment_id"]], info$block[["offset"]],
                            info$block[["length"]], info$block[["generation"]], "double", 1e4),
                 "has no references left")
})

test_that("integers and logicals with NA cross as masked arrays in blocks, which are then released", {
    gc()
    before <- arena_stats()[["blocks"]]
    for (x in list(c(1:10, NA), c(TRUE, NA, FALSE), matrix(c(NA, 2:6), 2))) {
        encoded <- encode(x, inline_limit = 0)
        expect_identical(decode(encoded$message, encoded$records, encoded$fds), x)
    }
    gc()
    expect_equal(arena_stats()[["blocks"]], before)
})

test_that("a frame's numeric columns in the arena are views, which R's data frame code reads as its own", {
    n <- 2e4
    df <- data.frame(a = runif(n), i = sample.int(100L, n, TRUE), f = factor(sample(letters, n, TRUE)))
    v <- big_view(df)
    expect_false(is.null(view_info(v$a)))
    expect_false(is.null(view_info(v$i)))
    expect_identical(v, df)
    reads <- list(colMeans, as.matrix, function(d) unlist(d, use.names = FALSE), function(d) c(d$a, d$i), summary,
                  function(d) table(d$i), function(d) factor(d$i), function(d) d[d$a > 0.5, ], function(d) order(d$i, d$a),
                  function(d) as.numeric(d$i), function(d) cumsum(d$a), function(d) range(d$a), function(d) rev(d$i),
                  function(d) serialize(d, NULL))
    for (f in reads) expect_identical(f(v[c("a", "i")]), f(df[c("a", "i")]))
    expect_identical(tapply(v$a, v$f, sum), tapply(df$a, df$f, sum))
    expect_identical(aggregate(a ~ f, v, mean), aggregate(a ~ f, df, mean))
    expect_false(view_info(v$a)$written || view_info(v$i)$written)
})

test_that("writing to a frame's column changes a copy of it; unwritten columns go back as their blocks", {
    n <- 2e4
    df <- data.frame(a = runif(n), i = sample.int(100L, n, TRUE))
    v <- big_view(df)
    w <- v
    w$a[1] <- -1
    w$i[2] <- 0L
    expect_identical(w, transform(df, a = replace(a, 1, -1), i = replace(i, 2, 0L)))
    expect_identical(v, df)
    expect_false(view_info(v$a)$written)
    gc()
    before <- arena_stats()[["blocks"]]
    unwritten <- encode(v, inline_limit = 0)
    expect_equal(arena_stats()[["blocks"]], before)
    written <- encode(w, inline_limit = 0)
    expect_equal(arena_stats()[["blocks"]], before + 2)
    expect_identical(decode(unwritten$message, unwritten$records, unwritten$fds), df)
    expect_identical(decode(written$message, written$records, written$fds), w)
})

test_that("NA checks of an integer view answer as for R's own vector, before and after R writes NA to it", {
    x <- sample.int(100L, 2e4, TRUE)
    v <- big_view(x)
    expect_false(anyNA(v))
    expect_identical(is.na(v), is.na(x))
    v[7] <- NA
    x[7] <- NA
    expect_true(anyNA(v))
    expect_identical(which(is.na(v)), 7L)
    expect_identical(as.numeric(v), as.numeric(x))
    expect_identical(mean(v, na.rm = TRUE), mean(x, na.rm = TRUE))
    m <- big_view(matrix(x, 100))
    storage.mode(m) <- "double"
    expect_identical(m, matrix(as.numeric(x), 100))
})

test_that("an integer64 column is a view that bit64 reads and writes as its own vectors", {
    skip_if_not_installed("bit64")
    x <- bit64::as.integer64(seq_len(2e4)) * bit64::as.integer64(3e9)
    df <- data.frame(j = x)
    v <- big_view(df)
    expect_false(is.null(view_info(v$j)))
    expect_identical(v, df)
    expect_identical(list(sum(v$j), max(v$j), as.character(v$j[1:3]), anyNA(v$j), v$j[v$j > x[19999]]),
                     list(sum(x), max(x), as.character(x[1:3]), FALSE, x[20000]))
    w <- v
    w$j[1] <- bit64::NA_integer64_
    expect_identical(which(is.na(w$j)), 1L)
    expect_identical(v, df)
})
