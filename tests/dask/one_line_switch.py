"""A concurrent.futures program whose pool is a mizu pool or a Dask cluster, by one line.

Usage: python one_line_switch.py mizu
       python one_line_switch.py dask SCHEDULER_ADDRESS

It prints what its tasks return; the output is the same either way.
"""

import concurrent.futures as cf
import sys

import numpy as np

import mizu


def square(x):
    return x * x


def power(base, exponent=2):
    return base**exponent


def main():
    if sys.argv[1] == "mizu":
        pool = mizu.ProcessPoolExecutor(2, by_value=True)
    else:
        from distributed import Client

        pool = Client(sys.argv[2]).get_executor(pure=False)
    offset = 100
    with pool:
        print(list(pool.map(square, range(10))))
        print(pool.submit(power, 2, exponent=10).result())
        print(list(pool.map(lambda v: v + offset, [1, 2, 3])))
        futures = [pool.submit(square, i) for i in range(20)]
        print(sorted(f.result() for f in cf.as_completed(futures)))
        done, not_done = cf.wait(futures)
        print(len(done), len(not_done))
        a = np.arange(1 << 20, dtype=np.float64)
        print(pool.submit(np.add, a, a).result().sum())
        try:
            pool.submit(divmod, 1, 0).result()
        except ZeroDivisionError as exc:
            print(type(exc).__name__, exc)


if __name__ == "__main__":
    main()
