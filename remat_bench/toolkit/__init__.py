"""What several methods share: the forward-plan lowering, peak shaving, order search, the any-order
bound, MILP helpers, child processes, the fastest-fit post-pass.

Imports only `remat_bench.core`; methods build on it, and never on each other.
"""
