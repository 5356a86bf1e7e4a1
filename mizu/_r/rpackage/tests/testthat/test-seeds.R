test_that("random_seed wraps the words of 2^31 and more to R's integers, 2^31 itself to NA_integer_'s bits", {
    expect_identical(random_seed(c(10407, 0, 2^31 - 1, 2^31, 2^31 + 1, 2^32 - 1)),
                     c(10407L, 0L, .Machine$integer.max, NA_integer_, -.Machine$integer.max, -1L))
})

test_that("with_stream draws from the stream given, then puts back the global .Random.seed", {
    set.seed(1)
    before <- .Random.seed
    set.seed(7, kind = "L'Ecuyer-CMRG")
    stream <- .Random.seed
    expected <- runif(3)
    RNGkind("Mersenne-Twister")
    set.seed(1)
    words <- ifelse(stream < 0, stream + 2^32, stream)
    expect_identical(with_stream(words, runif, 3), expected)
    expect_identical(.Random.seed, before)
    expect_identical(RNGkind()[[1L]], "Mersenne-Twister")
})
