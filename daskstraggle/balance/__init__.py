"""Dynamic load balancing (DSAG paper §VI): the optimizer (Alg. 1), partition alignment
(Alg. 2) and the :class:`LoadBalancer` a runtime asks for plans."""

from daskstraggle.balance.balancer import LoadBalancer, check_balance
from daskstraggle.balance.optimizer import BalancePlan, optimize
from daskstraggle.balance.partition import (
    align,
    align_next,
    part_start,
    part_stop,
    part_trans,
    subpartition_bounds,
)

__all__ = [
    "BalancePlan", "LoadBalancer", "align", "align_next", "check_balance", "optimize",
    "part_start", "part_stop", "part_trans", "subpartition_bounds"
]
