"""torch for the PyTorch tests: imported, or the test module fails with how to install it.

The PyTorch tests are never skipped without it: `make install` installs torch, and CI must run
them. Importing this module also sets one intra-op thread: on a small shared machine OpenMP's
spinning barriers make two threads up to 40 times slower than one, and results do not depend on
it (the CPU kernels are deterministic).
"""

from __future__ import annotations

try:
    import torch
except ImportError as exc:  # fail loudly: CI must run these tests
    raise ImportError(
        "the PyTorch tests need torch: run `make install`, or `.venv/bin/pip install torch==2.14.1` "
        "(or `pip install remat-bench[torch]`)"
    ) from exc

torch.set_num_threads(1)

__all__ = ["torch"]
