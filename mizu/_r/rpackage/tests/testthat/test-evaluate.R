outer_fn <- function(x) inner_fn(x)
inner_fn <- function(x) stop("boom: ", x)

test_that("a value comes back with no error", {
    result <- eval_safely(quote(1 + 1))
    expect_identical(result$value, 2)
    expect_null(result$error)
    expect_identical(result$warnings, list())
})

test_that("stop() gives a record with message, call, classes and traceback", {
    env <- environment()
    error <- eval_safely(quote(outer_fn("x")), env)$error
    expect_identical(error$message, "boom: x")
    expect_identical(error$call, "inner_fn(x)")
    expect_identical(error$classes, c("simpleError", "error", "condition"))
    expect_identical(error$traceback, c("outer_fn(\"x\")", "inner_fn(x)", "stop(\"boom: \", x)"))
})

test_that("a custom error condition, stopped or only signalled, ends the call", {
    cond <- structure(class = c("mizuTestError", "error", "condition"), list(message = "custom", call = NULL))
    for (call in list(bquote(stop(.(cond))), bquote({signalCondition(.(cond)); "not reached"}))) {
        result <- eval_safely(call)
        expect_null(result$value)
        expect_identical(result$error$message, "custom")
        expect_identical(result$error$classes, c("mizuTestError", "error", "condition"))
        expect_null(result$error$call)
    }
})

test_that("an error raised in compiled code is a record", {
    error <- eval_safely(quote(sum("a")))$error
    expect_identical(error$message, "invalid 'type' (character) of argument")
    expect_identical(error$call, "sum(\"a\")")
})

test_that("an interrupt is a record", {
    error <- eval_safely(quote({tools::pskill(Sys.getpid(), tools::SIGINT); Sys.sleep(5); "not reached"}))$error
    expect_identical(error$classes, c("interrupt", "condition"))
    expect_identical(error$message, "the R call was interrupted")
})

test_that("warnings are collected with their calls, and muffled", {
    warn_fn <- function() { warning("careful"); as.integer("a") }
    result <- eval_safely(quote(warn_fn()), environment())
    expect_identical(result$value, NA_integer_)
    expect_identical(vapply(result$warnings, `[[`, "", "message"), c("careful", "NAs introduced by coercion"))
    expect_identical(result$warnings[[1]]$call, "warn_fn()")
    expect_identical(result$warnings[[1]]$classes, c("simpleWarning", "warning", "condition"))
    expect_null(eval_safely(quote(warning("top")))$warnings[[1]]$call)
    expect_length(eval_safely(quote(for (i in 1:60) warning(i)))$warnings, 50)
})

test_that("an error after warnings keeps both", {
    result <- eval_safely(quote({warning("first"); stop("then")}))
    expect_identical(result$error$message, "then")
    expect_identical(result$warnings[[1]]$message, "first")
})

test_that("evaluations nest, each with its own record", {
    result <- eval_safely(quote({
        inner <- eval_safely(quote(stop("inner")))
        warning("outer warning")
        inner$error$message
    }), environment())
    expect_identical(result$value, "inner")
    expect_identical(result$warnings[[1]]$message, "outer warning")
})

test_that("a traceback deparses each call on one line, cut when long", {
    big <- runif(1e6)
    fail <- function(x) stop("no")
    error <- eval_safely(bquote(fail(.(big))), environment())$error
    expect_match(error$traceback[[1]], "^fail\\(c\\(.* \\.\\.\\.$")
    expect_lt(nchar(error$traceback[[1]]), 600)
})

test_that("functions registered by source, name or namespaced name are called with named arguments", {
    id <- register_function("function(x, p) quantile(x, p, names = FALSE)")$value
    expect_identical(call_function(id, list(c(4, 1, 3, 2)), list(p = 0.5))$value, 2.5)
    median_id <- register_function("stats::median")$value
    expect_identical(call_function(median_id, list(c(3, 1, 2)))$value, 2)
    mean_id <- register_function("mean")$value
    expect_identical(call_function(mean_id, list(c(1, NA, 3)), list(na.rm = TRUE))$value, 2)
    error <- call_function(id, list("a"), list(p = 0.5))$error
    expect_identical(error$traceback[1:2], c("FUN(\"a\", p = 0.5)", "quantile(x, p, names = FALSE)"))
    expect_error(call_function(999L, list()), "no R function has id 999")
})

test_that("registering what is no function is a record, not an error", {
    expect_match(register_function("function(x")$error$message, "unexpected end of input")
    expect_match(register_function("no_such_function_here")$error$message, "of mode 'function' was not found")
    expect_match(register_function("1 + 1")$error$message, "1 \\+ 1 is an object of class \"numeric\", not a function")
    expect_match(register_function("f <- 1; g <- 2")$error$message, "one expression, not 2")
})
