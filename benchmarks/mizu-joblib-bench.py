"""joblib's backends side by side: mizu, loky, multiprocessing, threading and sequential; scikit-learn on mizu and loky.

Each loop is ``Parallel(n_jobs=4)`` over delayed calls, run in turn with
each backend (and with "sequential", which runs them in this process at
joblib's own cost per call), several times; the first call of each backend, which starts
its workers, is not timed. The loops: 100,000 trivial calls, 2,000 calls of
~5 us of pure Python, 16 calls that each take a 100 MB float64 array
and return its sum and a new 100 MB array (its negation), 16 calls that
each take those numbers as a numpy.memmap of a file (``joblib.load(path,
mmap_mode="r")``) and return its last item, 16 calls of a function of
this script that reads those numbers as a global (which a function of
``__main__``, pickled by value, takes with it), and, when pandas is
installed, 16 calls that each take them as a DataFrame and return the sum
of its last row. Then a scikit-learn grid search (a random
forest's depths and sizes, 3-fold, n_jobs=4) under
parallel_config(backend="mizu") and "loky", in
alternation, when scikit-learn is installed. Medians are printed, per task for the loops,
with mizu's speed-up over each. While it runs, it names on stderr each loop
and backend; --json also writes the table, with every sample, to a file.

Usage: python benchmarks/mizu-joblib-bench.py [--repeats N] [--quick] [--json PATH [--note TEXT]]
"""

import os
import platform
import statistics
import sys
import tempfile
import time

import joblib
import numpy as np
from joblib import Parallel, delayed, parallel_config

import mizu
import record

N_JOBS = 4


def trivial(x):
    return x


def five_us(x):
    """About 5 us of pure Python."""
    return sum(range(x % 3, 60))


def sum_and_negative(a):
    return a.sum(), np.negative(a)


def last_item(array):
    return float(array[-1])


def last_row_total(frame):
    return float(frame.iloc[-1].sum())


GLOBAL = None   # the array that item_of_global reads, set by main


def item_of_global(i):
    """An item of a large array that the function reads as a global of this script, not as an argument."""
    return float(GLOBAL[i])


def grid_search(backend, quick):
    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.model_selection import GridSearchCV

    X, y = make_classification(n_samples=500 if quick else 2000, n_features=20, random_state=0)
    grid = {"max_depth": [3, 6, None], "n_estimators": [10, 30]}
    with parallel_config(backend=backend):
        search = GridSearchCV(RandomForestClassifier(random_state=0), grid, cv=3, n_jobs=N_JOBS).fit(X, y)
    return search.best_score_


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = record.parser(__doc__.splitlines()[0], 3, "runs of each loop and backend (default 3)",
                           "smaller loops, for a smoke test")
    args = parser.parse_args(argv)
    scale = 20 if args.quick else 1
    big = np.random.default_rng(0).random((100 << 20) // 8 // (scale if args.quick else 1))
    loops = [
        (f"{100_000 // scale:,} trivial calls", trivial, [i for i in range(100_000 // scale)],
         lambda got: got == list(range(100_000 // scale))),
        (f"{2_000 // scale:,} calls of ~5 us", five_us, [i for i in range(2_000 // scale)],
         lambda got: got == [five_us(i) for i in range(2_000 // scale)]),
        (f"16 calls on {big.nbytes >> 20} MB, returning {big.nbytes >> 20} MB", sum_and_negative, [big] * 16,
         lambda got: len(got) == 16 and np.isclose(got[0][0], big.sum()) and got[-1][1][7] == -big[7]),
    ]
    global GLOBAL
    GLOBAL = big
    loops.append((f"16 calls reading a {big.nbytes >> 20} MB global", item_of_global, list(range(16)),
                  lambda got: got == [float(big[i]) for i in range(16)]))
    folder = tempfile.TemporaryDirectory()
    joblib.dump(big, os.path.join(folder.name, "big.joblib"))
    mapped = joblib.load(os.path.join(folder.name, "big.joblib"), mmap_mode="r")
    loops.append((f"16 calls on a {big.nbytes >> 20} MB memmap", last_item, [mapped] * 16,
                  lambda got: got == [float(big[-1])] * 16))
    try:
        import pandas
    except ImportError:
        print("pandas is not installed: no loop on a DataFrame")
    else:
        frame = pandas.DataFrame(big.reshape(-1, 4), columns=list("abcd"))
        total = last_row_total(frame)
        loops.append((f"16 calls on a {big.nbytes >> 20} MB DataFrame", last_row_total, [frame] * 16,
                      lambda got: got == [total] * 16))
    # "sequential" runs each loop in this process: joblib's own cost per call, the floor of the others.
    names = ["mizu", "loky", "multiprocessing", "threading", "sequential"]
    samples = {(title, name): [] for title, *_ in loops for name in names}
    for name in names:
        with parallel_config(backend=name, n_jobs=N_JOBS):
            Parallel()(delayed(trivial)(i) for i in range(100))
            for title, fn, inputs, check in loops:
                record.progress(f"{name}: {title}")
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    got = Parallel()(delayed(fn)(x) for x in inputs)
                    samples[(title, name)].append((time.perf_counter() - start) / len(inputs))
                    if not check(got):
                        raise RuntimeError(f"{name} computed something else for {title}")
                    del got
    print(f"joblib's backends, {time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, "
          f"joblib {joblib.__version__}, mizu {mizu.__version__}, {platform.machine()}, {os.cpu_count()} CPUs, "
          f"n_jobs={N_JOBS}, median of {args.repeats} runs (us per task)")
    print(f"{'loop':<36}" + "".join(f"{n:>16}" for n in names) + "".join(f"{'x vs ' + n:>21}" for n in names[1:]))
    rows = []
    for title, *_ in loops:
        med = {n: statistics.median(samples[(title, n)]) for n in names}
        print(f"{title:<36}" + "".join(f"{med[n] * 1e6:>16.2f}" for n in names)
              + "".join(f"{med[n] / med['mizu']:>20.2f}x" for n in names[1:]))
        rows.append({"row": title, "unit": "s per task", "median": med,
                     "samples": {n: samples[(title, n)] for n in names}})
    try:
        import sklearn
    except ImportError:
        print("scikit-learn is not installed: no grid search")
    else:
        # The two backends in alternation, run after run: the machine's drift falls on both.
        searches = {"mizu": [], "loky": []}
        for name in ("mizu", "loky"):
            record.progress(f"{name}: scikit-learn grid search")
            searches[f"{name} score"] = grid_search(name, args.quick)
        for _ in range(args.repeats):
            for name in ("mizu", "loky"):
                start = time.perf_counter()
                grid_search(name, args.quick)
                searches[name].append(time.perf_counter() - start)
        if searches["mizu score"] != searches["loky score"]:
            raise RuntimeError(f"the grid searches found {searches['mizu score']} and {searches['loky score']}")
        med = {n: statistics.median(searches[n]) for n in ("mizu", "loky")}
        print(f"scikit-learn {sklearn.__version__} GridSearchCV, random forest, 6 candidates x 3 folds (s): "
              f"mizu {med['mizu']:.3f}, loky {med['loky']:.3f}, {med['loky'] / med['mizu']:.2f}x")
        rows.append({"row": "scikit-learn grid search", "unit": "s", "median": med,
                     "samples": {n: searches[n] for n in ("mizu", "loky")}})
    folder.cleanup()
    if args.json:
        record.write(args.json, "mizu-joblib-bench", argv, args, backends=names, n_jobs=N_JOBS, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
