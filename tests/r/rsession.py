"""Running Rscript with the R package: one-off scripts, and a session that serves requests."""

import os
import struct
import subprocess
import tempfile

import numpy as np

from mizu._r import package as rpackage


def r_environment(library):
    """The environment Rscript needs to load the R package from `library`."""
    return dict(os.environ, R_LIBS=str(library), R_DEFAULT_PACKAGES="stats")


def run_rscript(library, code, pass_fds=()):
    """Run R `code` in a fresh Rscript; its stdout, or AssertionError with its stderr."""
    done = subprocess.run([str(rpackage.find_rscript()), "--vanilla", "-e", code], capture_output=True, text=True,
                          env=r_environment(library), pass_fds=pass_fds, timeout=120)
    assert done.returncode == 0, f"Rscript failed:\n{done.stderr}"
    return done.stdout


def r_has_package(library, name):
    """Whether R can load the package `name`."""
    return run_rscript(library, f"cat(requireNamespace({name!r}, quietly = TRUE))").strip() == "TRUE"


# An R process that answers requests on its stdin and stdout: each request
# is R code, a wire message, the out-of-band buffer records of the arena
# arrays it names (csrc/messages.hpp) and the descriptors they index, plus
# the inline limit for its answer. R decodes the message into `x`, evaluates
# the code with `x` bound, and answers with the wire message of the code's
# value and the records of the arena blocks that message names, or with
# the text of the R error. `x` is bound once, so R may modify it in place.
_SERVE = r"""
library(mizu)
input <- file("stdin", "rb")
output <- file("/dev/stdout", "wb")
read_raw <- function(n) if (n == 0) raw() else readBin(input, "raw", n)
read_number <- function(size) {
    bytes <- read_raw(size)
    if (length(bytes) < size) quit(save = "no")
    sum(as.numeric(bytes) * 256^(seq_len(size) - 1))
}
number <- function(n, size) as.raw((n %/% 256^(seq_len(size) - 1)) %% 256)
repeat {
    code <- rawToChar(read_raw(read_number(4)))
    message <- read_raw(read_number(8))
    records <- read_raw(64 * read_number(4))
    fds <- readBin(input, "integer", read_number(4), size = 4, endian = "little")
    fds[fds < 0] <- NA_integer_
    limit <- read_number(8)
    answer <- tryCatch({
        env <- new.env(parent = globalenv())
        env$x <- mizu:::decode(message, records, fds)
        encoded <- mizu:::encode(eval(parse(text = code), env), limit)
        c(as.raw(0), number(length(encoded$message), 8), encoded$message,
          number(length(encoded$records) %/% 64, 4), encoded$records)
    }, error = function(e) c(as.raw(1), charToRaw(enc2utf8(conditionMessage(e)))))
    writeBin(c(number(length(answer), 8), answer), output)
    flush(output)
}
"""


class RError(Exception):
    """An R error a request raised, with R's message."""


class RSession:
    """One Rscript serving requests, with descriptors of arena segments inherited at its start."""

    def __init__(self, library, inherited_fds):
        self.inherited = set(inherited_fds)
        self.stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen([str(rpackage.find_rscript()), "--vanilla", "-e", _SERVE], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.stderr, env=r_environment(library),
                                        pass_fds=sorted(self.inherited))

    @property
    def pid(self):
        return self.process.pid

    def request(self, code, message, shares=(), inline_limit=1 << 16):
        """(message, R's buffer records) that R answers: `code`'s value with x = the decoded `message`.

        shares are (Block.share() bytes, segment descriptor, offset, length)
        for the message's out-of-band buffers, in order; a descriptor this
        process did not pass at the start is sent as -1, and R maps the
        segment through /proc.
        """
        fds, records = [], []
        for ref, fd, offset, length in shares:
            if fd not in fds:
                fds.append(fd)
            records.append(ref + struct.pack("<QQH6x", offset, length, fds.index(fd)))
        fds = [fd if fd in self.inherited else -1 for fd in fds]
        code = code.encode()
        request = b"".join([struct.pack("<I", len(code)), code, struct.pack("<Q", len(message)), message,
                            struct.pack("<I", len(records)), *records, struct.pack("<I", len(fds)),
                            struct.pack(f"<{len(fds)}i", *fds), struct.pack("<Q", inline_limit)])
        self.process.stdin.write(request)
        self.process.stdin.flush()
        header = self.process.stdout.read(8)
        if len(header) < 8:
            self.stderr.seek(0)
            raise AssertionError(f"the R session ended:\n{self.stderr.read().decode(errors='replace')}")
        answer = self.process.stdout.read(struct.unpack("<Q", header)[0])
        if answer[0] == 1:
            raise RError(answer[1:].decode())
        (size,) = struct.unpack_from("<Q", answer, 1)
        message = answer[9:9 + size]
        (count,) = struct.unpack_from("<I", answer, 9 + size)
        records = answer[13 + size:]
        assert len(records) == 64 * count
        return message, [records[64 * k:64 * k + 64] for k in range(count)]

    def close(self):
        self.process.stdin.close()
        assert self.process.wait(timeout=60) == 0
        self.process.stdout.close()
        self.stderr.close()


def r_oracle(library, code, *arrays):
    """What a fresh Rscript computes alone: the value of `code` as float64, with x1, x2, ... the arrays given.

    Each array reaches R as a double vector (with its dim for two or more
    dimensions) read from a file, so nothing of mizu is involved; the value
    comes back, flattened in R's order, through another file.
    """
    with tempfile.TemporaryDirectory() as tmp:
        lines = []
        for k, array in enumerate(arrays, 1):
            path = os.path.join(tmp, f"x{k}")
            array = np.asarray(array, dtype=np.float64)
            with open(path, "wb") as file:
                file.write(array.tobytes(order="F"))
            lines.append(f"x{k} <- readBin({path!r}, 'double', {array.size})")
            if array.ndim > 1:
                lines.append(f"dim(x{k}) <- c({', '.join(map(str, array.shape))})")
        out = os.path.join(tmp, "out")
        lines.append(f"writeBin(as.double(local({{ {code} }})), {out!r})")
        run_rscript(library, "\n".join(lines))
        return np.fromfile(out, dtype=np.float64)
