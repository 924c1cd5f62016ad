"""remat-bench: compare tensor-rematerialization methods on one footing.

Every method reads one graph format and writes one schedule format; one shared
simulator scores every schedule for peak memory and duration.
"""

__version__ = "0.1.0"
