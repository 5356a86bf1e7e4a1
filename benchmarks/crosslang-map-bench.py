"""mizu's R pool side by side with the other ways to call R from Python, and with R alone.

Rows: a trivial R call's round trip; sum(x) and x * 2 of a 1e6-element
float64 array (x * 2 coming back included); a map of an R function over
1,000 chunks of 1,000 doubles with 2 and 4 workers (serially where a
system has no pool); colMeans and table() on a 1e6-row data frame (two float64
columns, an int32, a bool, a 10-level categorical), and that frame's round
trip through function(df) df; and the memory that 4 R workers add while
each reads one 1 GB array. Systems: mizu.RExecutor on mizu.empty arrays
(and on views of one for the map, and a frame whose float64 and int32
columns are such arrays); rpy2 in the client's process, converting with
numpy2ri (pandas2ri for frames, two samples, left out with --quick) in one
converter context per call as rpy2's documentation does; rpy2-hand, the
frames converted by hand at rpy2's C level (one copy a column, compact
row names); a spawn ProcessPoolExecutor whose workers call R through rpy2
(its map at chunksize 1 and 50; frames converted by hand in the worker);
parallel::mclapply with 2 and 4 cores, timed inside R; Rscript started
for each call (the trivial call, and sum with its vector read from a file,
as writeBin/readBin do; up to 3 samples); and R alone, the same
computations timed inside one Rscript on R's own vectors. A last line
gives the private memory one R worker adds while it holds and has read
the frame's float64 and int32 columns.
rpy2 rows need ``pip install rpy2 'rpy2-rinterface<3.6.6'`` with Debian's
R 4.2 (newer rinterface calls R 4.5's API); without it they are left out.

Every system runs in the same invocation, each row several times over;
medians are printed, then mizu's time over each other system's. Results
are checked against numpy's; the script exits 1 if one is wrong.
--json also writes every sample to a file.

Usage: python benchmarks/crosslang-map-bench.py [--repeats N] [--quick] [--json PATH [--note TEXT]]
"""

import concurrent.futures as cf
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

import mizu
import record

N = 1_000_000
CHUNKS, CHUNK = 1_000, 1_000
TRIVIAL = "function(x) x"
X2 = "function(x) x * 2"
MAPPED = "function(x) sum(sqrt(abs(x)))"
SAMPLE_SECONDS = 0.3
# The data frame rows: 1e6 rows of two float64 columns, an int32, a bool and a
# 10-level categorical (R: a factor); the summary is R's colMeans of the
# numeric columns and table() of the factor.
FRAME_ROWS = 1_000_000
SUMMARY = "function(df) list(colMeans(df[c('a', 'b', 'i')]), table(df$f))"
IDENTITY = "function(df) df"

ROWS = [
    ("trivial", "trivial R call, round trip", "us", 1e6),
    ("vec_sum", "sum(x), 1e6 doubles", "ms", 1e3),
    ("vec_x2", "x * 2, 1e6 doubles, result back", "ms", 1e3),
    ("map_2w", "map over 1,000 chunks of 1,000, 2 workers", "ms", 1e3),
    ("map_4w", "the same map, 4 workers", "ms", 1e3),
    ("map_serial", "the same map, serially in one R", "ms", 1e3),
    ("df_summary", "colMeans + table, 1e6-row frame", "ms", 1e3),
    ("df_trip", "the frame's round trip", "ms", 1e3),
]


def per_call(call, quick):
    """Seconds per call(): calls in a loop of about SAMPLE_SECONDS, one call if a call takes longer."""
    start = time.perf_counter()
    call()
    first = time.perf_counter() - start
    budget = SAMPLE_SECONDS / (10 if quick else 1)
    if first >= budget:
        return first
    n = max(1, int(budget / max(first, 1e-7)))
    start = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - start) / n


def data():
    """The float64 vector in shared memory, and the map's chunks: views of a second one."""
    rng = np.random.default_rng(0)
    x = mizu.empty(N)
    x[:] = rng.standard_normal(N)
    whole = mizu.empty(CHUNKS * CHUNK)
    whole[:] = rng.standard_normal(whole.size)
    return x, [whole[i * CHUNK:(i + 1) * CHUNK] for i in range(CHUNKS)]


def frame():
    """The data frame rows' frame, its float64 and int32 columns in shared memory."""
    import pandas as pd

    rng = np.random.default_rng(1)
    a, b, i = mizu.empty(FRAME_ROWS), mizu.empty(FRAME_ROWS), mizu.empty(FRAME_ROWS, dtype=np.int32)
    a[:], b[:], i[:] = rng.standard_normal(FRAME_ROWS), rng.standard_normal(FRAME_ROWS), rng.integers(0, 1000, FRAME_ROWS)
    levels = [f"level{k}" for k in range(10)]
    return pd.DataFrame({"a": a, "b": b, "i": i, "l": rng.random(FRAME_ROWS) < 0.5,
                         "f": pd.Categorical.from_codes(rng.integers(0, 10, FRAME_ROWS), levels)}, copy=False)


def expected(x, chunks, df):
    return {"trivial": 1.0, "vec_sum": x.sum(), "vec_x2": x * 2,
            "map_2w": [np.sqrt(np.abs(c)).sum() for c in chunks],
            "map_4w": [np.sqrt(np.abs(c)).sum() for c in chunks],
            "df_summary": [df[["a", "b", "i"]].mean().to_numpy(), df["f"].value_counts(sort=False).to_numpy()],
            "df_trip": df}


def check(name, row, got, want):
    """Whether got is want, to rounding (R sums in long double, numpy pairwise)."""
    if row == "df_trip":
        import pandas as pd

        try:
            pd.testing.assert_frame_equal(got.reset_index(drop=True), want)
            ok = True
        except AssertionError:
            ok = False
    elif row == "df_summary":
        ok = np.allclose(np.ravel(got[0]), want[0], rtol=1e-9) and np.array_equal(np.ravel(got[1]), want[1])
    elif row in ("map_2w", "map_4w", "map_serial"):
        ok = len(got) == len(want) and np.allclose(np.ravel(got), want, rtol=1e-9)
    else:
        ok = np.allclose(np.ravel(got), np.ravel(want), rtol=1e-9)
    if not ok:
        record.progress(f"WRONG RESULT: {name} {row}")
    return ok


# -- mizu ----------------------------------------------------------------------------------------


def mizu_rows(x, chunks, df, want, quick, repeats, samples, wrong):
    with mizu.RExecutor(1) as r:
        calls = {
            "trivial": lambda: r.submit(TRIVIAL, 1.0).result(),
            "vec_sum": lambda: r.submit("sum", x).result(),
            "vec_x2": lambda: r.submit(X2, x).result(),
            "df_summary": lambda: r.submit(SUMMARY, df).result(),
            "df_trip": lambda: r.submit(IDENTITY, df).result(),
        }
        measure("mizu", calls, want, quick, repeats, samples, wrong)
    with mizu.RExecutor(2) as r:
        list(r.map(MAPPED, chunks[:8]))
        measure("mizu", {"map_2w": lambda: list(r.map(MAPPED, chunks))}, want, quick, repeats, samples, wrong)
    with mizu.RExecutor(4) as r:
        list(r.map(MAPPED, chunks[:8]))
        measure("mizu", {"map_4w": lambda: list(r.map(MAPPED, chunks))}, want, quick, repeats, samples, wrong)


def frame_memory_row(df):
    """MB an R worker's private memory grows by while it holds and has read the frame's float64 and int32 columns."""
    columns = df[["a", "b", "i"]]
    with mizu.RExecutor(1) as r:
        pid = int(r.submit("function() { gc(); Sys.getpid() }").result())
        time.sleep(0.5)  # the worker gives back what it freed after an idle slice
        before, _ = memory_mb(pid)
        read = r.submit("function(df) { s <- sum(df$a) + sum(df$b) + sum(as.numeric(df$i)); gc(); s }", columns)
        total = read.result()
        time.sleep(0.5)
        after, _ = memory_mb(pid)
    ok = np.isclose(total, columns["a"].sum() + columns["b"].sum() + float(columns["i"].sum()), rtol=1e-9)
    return after - before, columns.memory_usage(index=False).sum() / 1e6, ok


def measure(name, calls, want, quick, repeats, samples, wrong):
    for row, call in calls.items():
        record.progress(f"{name}: {row}")
        if not check(name, row, call(), want["map_2w" if row == "map_serial" else row]):
            wrong.append((name, row))
        samples[(row, name)] = [per_call(call, quick) for _ in range(repeats)]


def memory_mb(pid):
    """(private, resident) memory of a process, in MB: USS (Private_Clean + Private_Dirty) and Rss (Linux)."""
    private = resident = 0
    with open(f"/proc/{pid}/smaps_rollup") as smaps:
        for line in smaps:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                private += int(line.split()[1]) * 1024
            elif line.startswith("Rss:"):
                resident = int(line.split()[1]) * 1024
    return private / 1e6, resident / 1e6


def workers_mb(pids):
    """(private, resident) memory of these processes together, in MB."""
    both = [memory_mb(pid) for pid in pids]
    return sum(p for p, _ in both), sum(r for _, r in both)


def used_mb():
    """The machine's memory in use (MemTotal - MemAvailable), in MB."""
    fields = {}
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            key, value = line.split(":")
            fields[key] = int(value.split()[0]) * 1024
    return (fields["MemTotal"] - fields["MemAvailable"]) / 1e6


def memory_row(gigabytes):
    """MB that 4 R workers add, privately, resident and to the machine, while each holds and has read a 1 GB mizu.empty.

    Resident memory counts the shared pages each worker has mapped, and so
    shows that each read the whole array; private memory and the machine's
    memory in use show what the reads cost.
    """
    big = mizu.empty(int(gigabytes * 1e9) // 8)
    big[:] = 1.0
    with mizu.RExecutor(4) as r:
        pids = sorted(set(r.map("function(i) { Sys.sleep(0.05); Sys.getpid() }", range(8))))
        time.sleep(0.5)
        (private, resident), machine = workers_mb(pids), used_mb()
        gate = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"mizu-crosslang-{os.getpid()}")
        read = ("function(x, gate) { s <- sum(x); file.create(paste0(gate, Sys.getpid()));"
                " while (file.exists(gate)) Sys.sleep(0.01); c(s, Sys.getpid()) }")
        open(gate, "w").close()
        futures = [r.submit(read, big, gate) for _ in pids]
        deadline = time.monotonic() + 120
        while sum(os.path.exists(gate + str(p)) for p in pids) < len(pids) and time.monotonic() < deadline:
            time.sleep(0.01)
        (held_private, held_resident), held_machine = workers_mb(pids), used_mb()
        os.unlink(gate)
        results = [f.result() for f in futures]
        for p in pids:
            if os.path.exists(gate + str(p)):
                os.unlink(gate + str(p))
    ok = len(pids) == 4 and sorted(int(v[1]) for v in results) == pids and all(v[0] == big.size for v in results)
    return held_private - private, held_resident - resident, held_machine - machine, ok


# -- rpy2 ----------------------------------------------------------------------------------------


def rpy2_available():
    try:
        import rpy2.robjects  # noqa: F401
    except Exception as exc:   # ImportError, or rinterface failing to load against this R
        record.progress(f"rpy2 rows left out: {type(exc).__name__}: {exc}")
        return False
    return True


_R = {}


def rpy2_init():
    """In a process: R started by rpy2, the rows' functions defined in it."""
    import rpy2.robjects as ro
    from rpy2.robjects import default_converter, numpy2ri

    _R["converter"] = default_converter + numpy2ri.converter
    for name, source in (("trivial", TRIVIAL), ("sum", "sum"), ("x2", X2), ("mapped", MAPPED), ("summary", SUMMARY),
                         ("identity", IDENTITY)):
        _R[name] = ro.r(source)


def rpy2_call(name, arg):
    """_R[name](arg) converted both ways by numpy2ri, in a converter context of its own."""
    with _R["converter"].context():
        value = _R[name](arg)
    return value


def rpy2_frame_in(df):
    """The bench's frame as an R data.frame, converted by hand: one copy per column, compact row names."""
    import rpy2.rinterface as ri

    def floats(v):
        return ri.FloatSexpVector.from_memoryview(memoryview(np.ascontiguousarray(v, np.float64)))

    def ints(v):
        return ri.IntSexpVector.from_memoryview(memoryview(np.ascontiguousarray(v, np.int32)))

    set_class = ri.baseenv["class<-"]
    codes = ints(df["f"].cat.codes.to_numpy().astype(np.int32) + 1)
    codes.do_slot_assign("levels", ri.StrSexpVector([str(c) for c in df["f"].cat.categories]))
    columns = [floats(df["a"]), floats(df["b"]), ints(df["i"]), ri.baseenv["as.logical"](ints(df["l"])),
               set_class(codes, ri.StrSexpVector(["factor"]))]
    out = ri.ListSexpVector(columns)
    out.do_slot_assign("names", ri.StrSexpVector(list(df.columns)))
    out.do_slot_assign("row.names", ri.baseenv[".set_row_names"](ri.IntSexpVector([len(df)])))
    return set_class(out, ri.StrSexpVector(["data.frame"]))


def rpy2_frame_out(rdf):
    """The bench's frame back from R, converted by hand: one copy per column."""
    import pandas as pd

    a, b, i, l, f = (rdf[k] for k in range(5))
    codes = np.array(f, dtype=np.int32) - 1
    return pd.DataFrame({"a": np.array(a), "b": np.array(b), "i": np.array(i, dtype=np.int32),
                         "l": np.array(l, dtype=np.int32) != 0,
                         "f": pd.Categorical.from_codes(codes, list(f.do_slot("levels")))}, copy=False)


def rpy2_frame_call(name, df):
    """_R[name] on the frame, converted by hand both ways."""
    value = _R[name](rpy2_frame_in(df))
    if name == "identity":
        return rpy2_frame_out(value)
    return [np.array(value[0]), np.array(value[1])]


def rpy2_pandas_call(name, df):
    """_R[name] on the frame, converted both ways by pandas2ri, in a converter context of its own."""
    from rpy2.robjects import default_converter, pandas2ri

    with (default_converter + pandas2ri.converter).context():
        value = _R[name](df)
    return value if name == "identity" else [np.asarray(value[0]), np.asarray(value[1])]


def rpy2_rows(x, chunks, df, want, quick, repeats, samples, wrong):
    rpy2_init()
    calls = {
        "trivial": lambda: rpy2_call("trivial", 1.0),
        "vec_sum": lambda: rpy2_call("sum", x),
        "vec_x2": lambda: rpy2_call("x2", x),
        "map_serial": lambda: [rpy2_call("mapped", c) for c in chunks],
    }
    measure("rpy2", calls, want, quick, repeats, samples, wrong)
    plain = df.copy()
    frame_calls = {"df_summary": lambda: rpy2_frame_call("summary", plain),
                   "df_trip": lambda: rpy2_frame_call("identity", plain)}
    measure("rpy2-hand", frame_calls, want, quick, repeats, samples, wrong)
    if not quick:
        # pandas2ri takes seconds a call: two samples of one call each.
        frame_calls = {"df_summary": lambda: rpy2_pandas_call("summary", plain),
                       "df_trip": lambda: rpy2_pandas_call("identity", plain)}
        measure("rpy2", frame_calls, want, quick, min(repeats, 2), samples, wrong)


def ppe_rows(x, chunks, df, want, quick, repeats, samples, wrong):
    context = multiprocessing.get_context("spawn")
    plain = [np.array(c) for c in chunks]
    plain_df = df.copy()
    with cf.ProcessPoolExecutor(1, mp_context=context, initializer=rpy2_init) as pool:
        pool.submit(rpy2_call, "trivial", 1.0).result()
        calls = {
            "trivial": lambda: pool.submit(rpy2_call, "trivial", 1.0).result(),
            "vec_sum": lambda: pool.submit(rpy2_call, "sum", np.asarray(x)).result(),
            "vec_x2": lambda: pool.submit(rpy2_call, "x2", np.asarray(x)).result(),
            "df_summary": lambda: pool.submit(rpy2_frame_call, "summary", plain_df).result(),
            "df_trip": lambda: pool.submit(rpy2_frame_call, "identity", plain_df).result(),
        }
        measure("ppe-rpy2", calls, want, quick, repeats, samples, wrong)
    for workers in (2, 4):
        with cf.ProcessPoolExecutor(workers, mp_context=context, initializer=rpy2_init) as pool:
            list(pool.map(rpy2_call, ["trivial"] * 2 * workers, [1.0] * 2 * workers))
            for chunksize in (1, 50):
                mapped = lambda c=chunksize: list(pool.map(rpy2_call, ["mapped"] * CHUNKS, plain, chunksize=c))
                measure(f"ppe-rpy2 c{chunksize}", {f"map_{workers}w": mapped}, want, quick, repeats, samples, wrong)


# -- R alone, and mclapply ----------------------------------------------------------------------


R_SCRIPT = r"""
args <- commandArgs(TRUE)
repeats <- as.integer(args[[1L]]); budget <- as.double(args[[2L]])
per_call <- function(f) {
    t0 <- proc.time()[["elapsed"]]; f(); first <- proc.time()[["elapsed"]] - t0
    if (first >= budget) return(first)
    calls <- 0; spent <- 0; n <- 1
    while (spent < budget) {
        t0 <- proc.time()[["elapsed"]]
        for (i in seq_len(n)) f()
        spent <- spent + proc.time()[["elapsed"]] - t0; calls <- calls + n; n <- 2 * n
    }
    spent / calls
}
set.seed(1)
x <- rnorm(%(n)d)
chunks <- lapply(seq_len(%(chunks)d), function(i) rnorm(%(chunk)d))
trivial <- %(trivial)s
x2 <- %(x2)s
mapped <- %(mapped)s
summary_of <- %(summary)s
df <- data.frame(a = rnorm(%(frame_rows)d), b = rnorm(%(frame_rows)d), i = sample.int(1000L, %(frame_rows)d, TRUE),
                 l = runif(%(frame_rows)d) < 0.5, f = factor(sample(sprintf("level%%d", 0:9), %(frame_rows)d, TRUE)))
rows <- list(
    trivial = function() trivial(1),
    vec_sum = function() sum(x),
    vec_x2 = function() { y <- x2(x); NULL },
    map_serial = function() lapply(chunks, mapped),
    df_summary = function() summary_of(df))
for (name in names(rows))
    cat("R", name, vapply(seq_len(repeats), function(i) per_call(rows[[name]]), 0), "\n")
mc <- function() parallel::mclapply(chunks, mapped, mc.cores = 2L)
cat("mclapply", "map_2w", vapply(seq_len(repeats), function(i) per_call(mc), 0), "\n")
mc4 <- function() parallel::mclapply(chunks, mapped, mc.cores = 4L)
cat("mclapply", "map_4w", vapply(seq_len(repeats), function(i) per_call(mc4), 0), "\n")
"""


def r_rows(quick, repeats, samples):
    record.progress("R and mclapply: every row, in one Rscript")
    script = R_SCRIPT % {"n": N, "chunks": CHUNKS, "chunk": CHUNK, "trivial": TRIVIAL, "x2": X2, "mapped": MAPPED,
                         "summary": SUMMARY, "frame_rows": FRAME_ROWS}
    budget = SAMPLE_SECONDS / (10 if quick else 1)
    out = subprocess.run([shutil.which("Rscript") or "Rscript", "--no-save", "-e", script, str(repeats), str(budget)],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        name, row, *values = line.split()
        samples[(row, name)] = [float(v) for v in values]


# -- Rscript per call ---------------------------------------------------------------------------

RSCRIPT_CALL = r"""
args <- commandArgs(TRUE)
x <- if (args[[1L]] == "-") 1 else readBin(args[[1L]], "double", as.integer(args[[2L]]))
cat(format((%s)(x), digits = 17))
"""


def rscript_rows(x, want, quick, repeats, samples, wrong):
    """Rscript started for each call, its argument through a file (the page cache) as writeBin/readBin read it."""
    import tempfile

    rscript = shutil.which("Rscript") or "Rscript"
    with tempfile.NamedTemporaryFile(suffix=".bin") as data:
        np.asarray(x, dtype="<f8").tofile(data.name)

        def call(fn, path):
            out = subprocess.run([rscript, "--vanilla", "-e", RSCRIPT_CALL % fn, path, str(x.size)],
                                 capture_output=True, text=True, check=True).stdout
            return float(out)

        calls = {"trivial": lambda: call("function(x) x", "-"), "vec_sum": lambda: call("sum", data.name)}
        measure("Rscript", calls, want, quick, min(repeats, 3), samples, wrong)


# -- the table ----------------------------------------------------------------------------------


def table(samples, systems):
    lines = []
    head = f"{'row':<45}{'unit':>5}" + "".join(f"{s:>14}" for s in systems)
    lines += [head, "-" * len(head)]
    for row, title, unit, scale in ROWS:
        cells = []
        for s in systems:
            got = samples.get((row, s))
            cells.append(f"{statistics.median(got) * scale:>14.3g}" if got else f"{'':>14}")
        lines.append(f"{title:<45}{unit:>5}" + "".join(cells))
    lines += ["", "mizu's median over each system's (below 1: mizu is faster); in the serial map row, mizu's is",
              "its map with 2 workers", head.replace("unit", "    "), "-" * len(head)]
    for row, title, _, _ in ROWS:
        mine = samples.get(("map_2w" if row == "map_serial" else row, "mizu"))
        cells = []
        for s in systems:
            theirs = samples.get((row, s))
            ratio = statistics.median(mine) / statistics.median(theirs) if mine and theirs and s != "mizu" else None
            cells.append(f"{'':>14}" if ratio is None else f"{ratio:>14.3g}")
        lines.append(f"{title:<45}{'':>5}" + "".join(cells))
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = record.parser(__doc__.splitlines()[0], 5, "samples of each row and system (default 5)",
                           "shorter samples and a 0.1 GB memory row, a smoke test")
    args = parser.parse_args(argv)
    x, chunks = data()
    df = frame()
    want = expected(x, chunks, df)
    samples, wrong = {}, []
    mizu_rows(x, chunks, df, want, args.quick, args.repeats, samples, wrong)
    systems = ["mizu"]
    if rpy2_available():
        rpy2_rows(x, chunks, df, want, args.quick, args.repeats, samples, wrong)
        ppe_rows(x, chunks, df, want, args.quick, args.repeats, samples, wrong)
        systems += ["rpy2", "rpy2-hand", "ppe-rpy2", "ppe-rpy2 c1", "ppe-rpy2 c50"]
    rscript_rows(x, want, args.quick, args.repeats, samples, wrong)
    r_rows(args.quick, args.repeats, samples)
    systems += ["Rscript", "mclapply", "R"]
    record.progress("mizu: memory of 4 workers reading one array")
    gigabytes = 0.1 if args.quick else 1.0
    private, resident, machine, ok = memory_row(gigabytes)
    if not ok:
        wrong.append(("mizu", "memory"))
    record.progress("mizu: memory of a worker reading the frame")
    frame_private, frame_columns, ok = frame_memory_row(df)
    if not ok:
        wrong.append(("mizu", "frame memory"))
    print(f"crosslang-map-bench: medians of {args.repeats}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print(table(samples, systems))
    print(f"\n4 R workers each holding and having read one {gigabytes:g} GB mizu.empty array add "
          f"{private:.1f} MB of private memory and {machine:.1f} MB to the machine's memory in use "
          f"(their resident memory, shared pages included, grows by {resident:.0f} MB)")
    print(f"An R worker holding and having read the frame's float64 and int32 columns ({frame_columns:.0f} MB, "
          f"in mizu.empty arrays) adds {frame_private:.1f} MB of private memory")
    if args.json:
        rows = {f"{row}/{name}": {"median": statistics.median(v), "samples": v} for (row, name), v in samples.items()}
        rows["memory"] = {"gigabytes": gigabytes, "private_mb": private, "resident_mb": resident, "machine_mb": machine}
        rows["frame_memory"] = {"columns_mb": frame_columns, "private_mb": frame_private}
        record.write(args.json, "crosslang-map-bench", argv, args, rows=rows)
    if wrong:
        record.progress(f"wrong results: {wrong}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
