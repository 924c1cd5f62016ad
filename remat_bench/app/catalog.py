"""Every method a user can name: the registered methods (`remat_bench.methods`) and the portfolio.

``auto`` runs other methods, so it lives above them (`remat_bench.app.portfolio`) and is not in
the method registry; it is named here beside them, with the same interface (`Method`), so that
`solve`, sweeps and `remat-bench methods` treat it as one more choice.
"""

from __future__ import annotations

from remat_bench import methods as registry
from remat_bench.app.portfolio import Auto
from remat_bench.methods import Method, unknown_method

PORTFOLIOS: dict[str, type[Method]] = {"auto": Auto}


def method_names() -> list[str]:
    """Every name a user can give ``--method``: the registered methods, then the portfolio.

    Returns
    -------
    list of str
        The built-in methods, then any plugin methods, then ``auto``.
    """
    return [*registry.method_names(), *PORTFOLIOS]


def get_method(name: str) -> type[Method]:
    """The class named ``name``; an unknown name is one sentence listing the known ones.

    Parameters
    ----------
    name : str
        A method's name (``checkmate``) or a portfolio's (``auto``).

    Returns
    -------
    type of Method
        The class, not an instance.

    Raises
    ------
    MethodError
        An unknown name, with the closest known one suggested and all of them listed.
    """
    if name in PORTFOLIOS:
        return PORTFOLIOS[name]
    if name not in registry.method_names():
        raise unknown_method(name, method_names())
    return registry.get_method(name)
