"""R workers, as the Python side sees them.

The executor (`executor`), how its workers start (`launcher`), how they
take values and what their answers mean (`codec`, `frames`), how a pool's
messages speak of R calls (`texts`), and the build of the R package the
workers run (`package`). The engine (mizu._pool) is the Python pool's.
"""
