"""The compiled core: 2048 on bitboards and the n-tuple learner as numba kernels.

The bottom layer of dqnlab: plain NumPy arrays in, plain arrays out, nothing of the rest of the
package imported. Its modules:

* :mod:`~dqnlab.core.bitboard`: moves by row tables and transposes, legal moves, spawns, symmetries,
  for one board and batches; exact for every exponent the rules allow;
* :mod:`~dqnlab.core.ntuple`: n-tuple features by shifts and masks, values, the greedy afterstate
  move, in-place sparse SGD;
* :mod:`~dqnlab.core.loops`: the acting loop and the learner's loop, a chunk of thousands of env
  steps per call;
* :mod:`~dqnlab.core.clock`: a clock the kernels read;
* :mod:`~dqnlab.core.compile`: compiling (once per install, cached on disk) with a notice while it takes
  long, a cache that is emptied when the core's sources change, and a folder for it where numba finds none.

The kernels are compiled by numba the first time they run and cached on disk (``cache=True``): in the
package's ``__pycache__`` folders where they are writable, else in numba's per-user cache folder (or
``NUMBA_CACHE_DIR``), so a read-only install and every worker process (loky, Dask) load them
instead of compiling again; where none of these can be written, in a folder of the system's temporary
folder, or nowhere (:func:`~dqnlab.core.compile.kernel_cache`, which says so). They release the GIL
(``nogil=True``).
"""

from .compile import kernel_cache, refresh_cache

kernel_cache()
refresh_cache()
