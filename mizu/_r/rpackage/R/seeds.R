# A call of a task of a seeded pool (mizu/_r/streams.py): f(...) with
# `stream` as the global environment's .Random.seed, then the worker's own
# .Random.seed put back, so that a task without a seed draws from the
# worker's stream as if no seeded task had run. `stream` is the
# .Random.seed of an L'Ecuyer-CMRG stream as doubles: its kind, then the
# six state words, unsigned.
with_stream <- function(stream, f, ...) {
    env <- globalenv()
    if (!exists(".Random.seed", envir = env, inherits = FALSE)) set.seed(NULL)
    saved <- get(".Random.seed", envir = env, inherits = FALSE)
    on.exit(assign(".Random.seed", saved, envir = env))
    assign(".Random.seed", random_seed(stream), envir = env)
    f(...)
}

# R's integers of the unsigned 32-bit words in `words` (doubles): those of
# 2^31 or more wrap to negative, and 2^31 itself has the bits of NA_integer_.
random_seed <- function(words) {
    signed <- words - (words >= 2^31) * 2^32
    seed <- rep(NA_integer_, length(words))
    fits <- signed != -2^31
    seed[fits] <- as.integer(signed[fits])
    seed
}
