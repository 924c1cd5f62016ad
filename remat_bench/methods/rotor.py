"""Beaumont, Eyraud-Dubois, Herrmann, Joly and Shilova 2019, "Optimal checkpointing for heterogeneous
chains: how to train deep neural networks with limited memory" (rotor, arXiv:1911.13214), the
heterogeneous generalisation of Griewank and Walther's revolve (ACM TOMS 2000) and of Gruslys et al.
2016, "Memory-Efficient Backpropagation Through Time" (NeurIPS).

A chain of stages 0..K-1: the forward F_j of stage j reads its input a_j (the values of stage j-1 it
or its backward reads) and produces a_{j+1}; its backward B_j reads a_j, the activations abar_j it
saved (abar_j: beyond a_{j+1}) and the gradients of the later stages. With a_s resident and m
memory free, the least time to run the backward of stages s..t is, over persistent schedules
(rotor's dynamic program),

    C(t, t, m) = u_all(t) + u_b(t)                      when F_all(t) and B_t fit in m
    C(s, t, m) = min( u_all(s) + C(s+1, t, m - a_s - abar_s) + u_b(s),                    (F_all)
                      min_{s < s' <= t}  sum_{j=s}^{s'-1} u_f(j)
                                         + C(s', t, m - a_s) + C(s, s'-1, m) )             (F_ck)

(infinite when a step does not fit): F_all runs stage s keeping its activations, solves s+1..t,
then runs B_s; F_ck runs stages s..s'-1 keeping only the boundary value a_{s'}, solves s'..t
with it held, and then s..s'-1 again from a_s. Memory is counted in ``slots`` equal slots of the
budget, every size rounded up to whole slots, so the DP is exact on the discretised problem and
its schedule is never over the budget by rounding. The table holds every (s, t, m), and the
schedule is read back from the choices.

What this implementation adds, for training graphs that are not literally chains:

- **Stages.** The forward pass (its input order) is cut after positions where few values cross:
  each value spans from its position to its last forward reader (and to the latest forward
  co-input of a backward node that reads it); a cut may not fall inside a span that an earlier
  cut already crosses, so a value crosses at most one cut. Among the cuts a threshold on the
  crossing bytes admits, the most cuts (then the fewest crossing bytes) are chosen by a linear
  DP; several thresholds (quantiles of the crossing bytes) are tried, and on a graph with long
  spans (a quarter of the forward pass) also a decomposition that pins them, and the fastest
  schedule is kept. A chain's every layer, an unrolled recurrent stack's every time step (both
  cells of a step of a 2-layer GRU), a transformer's blocks become stages. More than ``max_stages``
  stages are thinned to that many, evenly by forward duration.
- **Backward nodes** go to the stage of the forward values they read (the latest one: the
  backward of stage j reads a_j and abar_j), or to the earliest stage of the backward values they
  read, when that comes first; backward nodes reading nothing go to the stage of their readers.
- **Pinned values.** A forward value read by a stage other than its own and the next (a long skip,
  a value a far backward node reads, a forward output) is pinned: computed once, kept from its
  first computation until the backward of the earliest stage reading it, never recomputed. The DP
  charges the pinned values alive in each subproblem, as it charges the gradients the later stages
  left (weight gradients accumulated across time steps): both are known from (s, t).
- **Sizes** come from the simulator's model: each stage's forward (keeping its input or not,
  keeping its activations or only the boundary, the first time or a recomputation) and backward is
  simulated alone for its peak, workspaces included, and its duration; frees are then placed by
  the shared ``place_frees``.
- **Boundary values kept.** After F_ck has solved s'..t, the values of a_{s'} that B_{s'-1} reads are
  still resident; the subproblem s..s'-1 may keep them (not recomputing them in its last stage,
  holding them through its forward steps) or let them go: the DP carries that flag (a "tail") and
  takes the better. Without it, rotor would recompute a chain's layer it still holds.
- **Checked, then tightened or loosened.** The schedule is simulated. Over the budget (a transient
  the stage model missed), the DP's memory is lowered by the excess and tried again; within it, the
  table's larger memories (it is built an eighth above the budget, since the stage model is
  conservative) are tried while they still fit. With ``budget=min``, the least memory at which the
  DP has a schedule, refined on a second, finer table.

- **Options** (Rockmate, Zhao et al. 2023). F_all may keep all of stage s's activations but some,
  which B_s computes again first from a_s and the values kept: ``options`` (default 4) such choices per
  stage, each with its own abar_s, forward, backward and peaks (`rotor_dp.keep_options`, which ranks
  the activations by what dropping each costs per byte, rather than solving each block as Rockmate
  does). A recurrent cell's autograd copies and a transformer block's cheap pointwise values are
  where they pay.

Left out: schedules that are not persistent (dropping a subchain's input to recompute it from an
earlier checkpoint), which the brute force finds on some heterogeneous chains. The decomposition is a heuristic, so the
schedule is optimal only among rotor's schedules over the stages chosen: the method answers
``feasible`` (or ``no_solution``, saying why).
"""

from __future__ import annotations

from typing import ClassVar

from remat_bench.methods.base import Membership, Role
from remat_bench.methods.rotor_dp import ChainDP


class Rotor(ChainDP):
    name = "rotor"
    description = ("Beaumont et al. 2019 (rotor): exact DP over a chain of stages (revolve for heterogeneous "
                   "chains), stages cut where few values cross")
    search_space = ("rotor's persistent schedules over a stage decomposition of the forward pass (cut where few "
                    "values cross); values read beyond the next stage are pinned: kept from their computation to "
                    "their last use")
    # Three times an equal share of the fast members' time: on a chain-like or recurrent graph it is the one
    # member that answers exactly, and the others (eviction, checkpoint planners) thrash or find nothing there.
    member: ClassVar[Membership | None] = Membership(Role.FAST, rank=4, weight=3.0)
