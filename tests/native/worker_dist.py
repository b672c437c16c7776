"""tests/multirank/worker_load.py with engine="native": dist tensor targets Shard(0),
Shard(1) and Replicate of every linear on 2 ranks, Paddle's ``load_transform`` installed.

Usage: worker_dist.py CKPT OUT FORMAT (started by paddle.distributed.launch from test_native.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2]))  # the repository root, for tests.*

from tests.multirank.worker_load import cuda_shim, main
from tests.native.conftest import install

if __name__ == "__main__":
    cuda_shim()  # TEST-ONLY: lets 3.3.1's reshard communicators run on a CPU-only build
    install()
    main(sys.argv[1], sys.argv[2], "native", sys.argv[3])
