# Evaluation that returns errors as records (src/evaluate.h).

# list(value =, error =, warnings =) of evaluating `call` in `env`.
eval_safely <- function(call, env = globalenv()) .Call(C_eval_safely, call, env)

# Keeps the function that `text` names or defines; returns as eval_safely
# does, with the function's id as the value.
register_function <- function(text) .Call(C_register_function, text)

call_function <- function(id, args = list(), kwargs = NULL) {
    .Call(C_call_function, id, args, kwargs)
}

# The condition handlers eval_safely establishes. An error (or interrupt)
# ends the call at once, as tryCatch would, through the "abort" restart,
# which returns to the top-level context of R_tryEvalSilent.
on_error <- function(cond) {
    .Call(C_record_error, cond, sys.calls())
    invokeRestart("abort")
}

# A warning is recorded for the client and muffled, as R's default
# options(warn = 0) would defer it; but under the call's own
# options(warn = 2) or more it is left to R, which turns it into an error
# (one that a try() around it catches), and under a negative warn it is
# dropped, as R drops it.
on_warning <- function(cond) {
    warn <- getOption("warn", 0L)
    if (warn >= 2L) return(invisible(NULL))
    if (warn >= 0L) .Call(C_record_warning, cond)
    tryInvokeRestart("muffleWarning")
}

format_error <- function(cond, calls) {
    list(message = condition_text(cond),
         call = condition_call(cond),
         classes = class(cond),
         traceback = vapply(calls, deparse_line, ""))
}

format_warnings <- function(conds) {
    lapply(conds, function(cond) {
        list(message = condition_text(cond), call = condition_call(cond), classes = class(cond))
    })
}

# The condition's call, deparsed; NULL where there is none, or where it is
# eval_safely's own withCallingHandlers (code outside any function).
condition_call <- function(cond) {
    call <- conditionCall(cond)
    if (is.null(call) || (is.call(call) && identical(call[[1L]], withCallingHandlers))) NULL
    else deparse_line(call)
}

condition_text <- function(cond) {
    text <- conditionMessage(cond)
    if (is.character(text) && length(text) == 1L) text
    else if (inherits(cond, "interrupt")) "the R call was interrupted"
    else paste(as.character(text), collapse = "\n")
}

# One line: a call that deparses longer is cut, and says so.
deparse_line <- function(call) {
    text <- deparse(call, width.cutoff = 500L, nlines = 2L)
    if (length(text) > 1L) paste(text[[1L]], "...") else text
}

# list(head =, env =): the function `text` names or defines, bound to `head`
# (its name, or FUN) in an environment of its own, where calls of it run.
resolve_function <- function(text) {
    exprs <- parse(text = text, keep.source = FALSE)
    if (length(exprs) != 1L) {
        stop(sprintf("the R source of a function must be one expression, not %d", length(exprs)), call. = FALSE)
    }
    expr <- exprs[[1L]]
    if (is.name(expr)) {
        fun <- get(as.character(expr), envir = globalenv(), mode = "function")
        head <- expr
    } else {
        fun <- eval(expr, globalenv())
        namespaced <- is.call(expr) && as.character(expr[[1L]]) %in% c("::", ":::")
        head <- if (namespaced) as.name(as.character(expr[[3L]])) else as.name("FUN")
    }
    if (!is.function(fun)) {
        stop(sprintf("%s is an object of class \"%s\", not a function", text, class(fun)[[1L]]), call. = FALSE)
    }
    env <- new.env(parent = globalenv())
    assign(as.character(head), fun, envir = env)
    list(head = head, env = env)
}
