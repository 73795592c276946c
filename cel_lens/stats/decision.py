"""The one decision rule of the package: the one-sided exact McNemar (sign) test of "ablating raises
accuracy", the exact bounds that agree with it by construction, and its power.

Every "significant", "survives" and "helps" a result prints is :func:`sign_test_p` at most
``alpha`` on the examples where the two models disagree; :func:`sign_test_bound` is the one-sided
lower bound that is positive exactly when the test rejects; :func:`minimum_detectable_effect` says
how large a gain the test would have found with 80 % power at a given ``n`` and discordance (what
a non-significant row can and cannot rule out). See ``docs/statistics.md``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Optional

__all__ = ["sign_test_p", "sign_test_bound", "sign_test_upper", "sign_test_power", "minimum_detectable_effect"]


def sign_test_p(wins: int, losses: int) -> float:
    """The one-sided exact McNemar (sign) test of "ablating raises accuracy": ``P(X >= wins)`` for
    ``X ~ Binomial(wins + losses, 1/2)``, where ``wins`` are the examples only the ablated model gets
    right and ``losses`` those only the intact one does (1 without discordant pairs). Exact rational
    arithmetic. This is the package's one decision rule: every "significant", "survives" and "helps"
    is this p at most ``alpha`` (docs/statistics.md)."""
    if wins < 0 or losses < 0:
        raise ValueError(f"counts must be >= 0, got {wins}, {losses}")
    m = wins + losses
    if m == 0:
        return 1.0
    return float(Fraction(sum(math.comb(m, i) for i in range(wins, m + 1)), 2**m))


def _binom_upper_tail(k: int, m: int, q: float) -> float:
    """``P(X >= k)`` for ``X ~ Binomial(m, q)``."""
    from scipy import stats as _st

    return 1.0 if k <= 0 else float(_st.binom.sf(k - 1, m, q))


def sign_test_bound(wins: int, losses: int, n: int, alpha: float = 0.05) -> float:
    """The exact one-sided lower confidence bound at level ``1 - alpha`` for the gain
    ``Δ = (wins - losses) / n`` that agrees with :func:`sign_test_p` by construction: given the
    ``m = wins + losses`` discordant examples, the Clopper–Pearson lower limit ``q`` of the share
    of them the ablated model wins, as ``Δ_low = (m / n)(2q - 1)``. ``Δ_low > 0`` exactly when
    ``sign_test_p(wins, losses) < alpha`` (equal to 0 when the p equals ``alpha``), so the bound and
    the decision never disagree. Conditional on the observed discordance (its own sampling noise is
    not in the bound); ``-m / n`` without wins."""
    if n <= 0 or wins + losses > n:
        raise ValueError(f"need wins + losses <= n and n > 0, got {wins}, {losses}, n={n}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    m = wins + losses
    if m == 0:
        return 0.0
    if wins == 0:
        return -m / n
    from scipy import stats as _st

    q = float(_st.beta.ppf(alpha, wins, m - wins + 1))
    return (m / n) * (2 * q - 1)


def sign_test_upper(wins: int, losses: int, n: int, alpha: float = 0.05) -> float:
    """The exact one-sided upper confidence bound at level ``1 - alpha`` for the gain (the mirror
    of :func:`sign_test_bound`): the largest gain these discordant pairs do not rule out."""
    return -sign_test_bound(losses, wins, n, alpha)


def sign_test_power(n: int, discordance: float, gain: float, alpha: float = 0.05) -> float:
    """Power of :func:`sign_test_p` at level ``alpha`` for a true gain ``gain`` when a share
    ``discordance`` of the ``n`` examples are discordant (their number taken as ``round(n ·
    discordance)``, each won by the ablated model with probability ``(1 + gain / discordance) / 2``)."""
    m = int(round(n * discordance))
    if m == 0 or gain <= -discordance:
        return 0.0
    q = min(1.0, (1 + gain / discordance) / 2)
    k = _critical_wins(m, alpha)
    return 0.0 if k is None else _binom_upper_tail(k, m, q)


def _critical_wins(m: int, alpha: float) -> Optional[int]:
    """The fewest wins out of ``m`` discordant examples that :func:`sign_test_p` rejects at ``alpha``
    (``None`` when even ``m`` wins do not)."""
    from scipy import stats as _st

    k = max(0, int(_st.binom.isf(alpha, m, 0.5)) - 1)  # a guess near the edge, then exact steps
    while k <= m and sign_test_p(k, m - k) > alpha:
        k += 1
    while k > 0 and sign_test_p(k - 1, m - k + 1) <= alpha:
        k -= 1
    return k if k <= m else None


def minimum_detectable_effect(n: int, discordance: float, alpha: float = 0.05, power: float = 0.8) -> Optional[float]:
    """The smallest gain (accuracy fraction) the one-sided exact McNemar test at level ``alpha``
    detects with probability ``power`` on ``n`` paired examples of which a share ``discordance``
    disagree (e.g. the observed ``(wins + losses) / n``): the answer to "how large an effect could
    this table have missed?". ``None`` when even ``gain = discordance`` (every discordant example won)
    does not reach ``power`` (too few discordant examples). Monotone in ``gain``; found by bisection
    to 1e-6. Use it beside a non-significant row: "not significant; effects below +x pp are not
    detectable at 80 % power at this n"."""
    if n <= 0 or not 0 <= discordance <= 1:
        raise ValueError(f"need n > 0 and 0 <= discordance <= 1, got n={n}, discordance={discordance}")
    if not 0 < power < 1:
        raise ValueError(f"power must lie in (0, 1), got {power}")
    m = int(round(n * discordance))
    k = _critical_wins(m, alpha) if m > 0 else None
    if k is None or _binom_upper_tail(k, m, 1.0) < power:
        return None
    lo, hi = 0.0, float(discordance)
    while hi - lo > 1e-6:
        mid = (lo + hi) / 2
        if _binom_upper_tail(k, m, min(1.0, (1 + mid / discordance) / 2)) >= power:
            hi = mid
        else:
            lo = mid
    return hi
