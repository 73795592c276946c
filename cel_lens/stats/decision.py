"""The one decision rule of the package: the one-sided exact McNemar (sign) test of "ablating raises
accuracy", the exact bounds that agree with it by construction, and its power.

Every "significant", "survives" and "helps" a result prints is :func:`sign_test_p` at most
``alpha`` on the examples where the two models disagree; :func:`gain_bounds` are the printed
one-sided bounds, each covering the true gain with probability at least ``1 - alpha`` whatever the
discordance, and never against the decision (:func:`sign_test_bound` is the bound conditional on the
observed discordance, positive exactly when the test rejects); :func:`minimum_detectable_effect` says
how large a gain the test would have found with 80 % power at a given ``n`` and discordance (what
a non-significant row can and cannot rule out). See ``docs/statistics.md``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Optional

import numpy as np
from jaxtyping import Bool, Float, Int

__all__ = ["sign_test_p", "sign_test_bound", "sign_test_upper", "gain_bounds", "gain_bounds_array", "sign_test_power",
           "minimum_detectable_effect", "sign_test_power_random", "minimum_detectable_effect_random", "DISCORDANCE_SHARE"]


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
    not in the bound, so it under-covers unconditionally: the printed bounds are :func:`gain_bounds`);
    ``-m / n`` without wins."""
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


DISCORDANCE_SHARE = 0.2
"""The share of ``alpha`` that :func:`gain_bounds` spends on the discordance (the rest on the share
of discordant examples the ablated model wins)."""


def _cp_low(k: int, m: int, a: float) -> float:
    """Clopper–Pearson one-sided lower limit at level ``1 - a`` for ``k`` successes of ``m``."""
    from scipy import stats as _st

    return 0.0 if k <= 0 else float(_st.beta.ppf(a, k, m - k + 1))


def _cp_high(k: int, m: int, a: float) -> float:
    """Clopper–Pearson one-sided upper limit at level ``1 - a`` for ``k`` successes of ``m``."""
    from scipy import stats as _st

    return 1.0 if k >= m else float(_st.beta.ppf(1 - a, k + 1, m - k))


def gain_bounds(wins: int, losses: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The printed one-sided ``(lower, upper)`` bounds for the gain ``Δ = d (2q - 1)`` (``d`` the
    true share of discordant examples, ``q`` the share of them the ablated model wins), each at level
    at least ``1 - alpha`` *unconditionally*. :func:`sign_test_bound` takes the observed
    ``(wins + losses) / n`` for ``d`` and under-covers when the discordance itself is noisy (an
    ablation that loses no example: 0.67–0.92). Here ``q`` gets its Clopper–Pearson limit at level
    ``1 - (1 - DISCORDANCE_SHARE) alpha`` given the discordant examples and ``d`` its Clopper–Pearson
    limits at level ``1 - DISCORDANCE_SHARE · alpha``; each bound takes the end of ``d`` that makes it
    safe (the lower bound ``d_low (2 q_low - 1)`` when that factor is positive, else ``d_high (2 q_low
    - 1)``). A bound can miss only when ``q`` or the one end of ``d`` it needs misses (for a gain >= 0
    the lower bound needs ``d_low``, for a gain < 0 ``d_high``), so coverage is at least ``1 -
    alpha`` (Bonferroni) for every ``d`` and ``q``. Agreement with the decision (:func:`sign_test_p`
    at most ``alpha``): the lower bound is positive only when the test rejects (it then rejects at the
    smaller level); when the test rejects, a lower bound below 0 is raised to 0, which can miss only a
    negative gain and only when the test is wrong (so at a negative gain the lower bound covers with
    probability at least ``1 - 2 alpha``). Without discordant examples: ``[-d_high, d_high]``."""
    if n <= 0 or wins < 0 or losses < 0 or wins + losses > n:
        raise ValueError(f"need 0 <= wins + losses <= n and n > 0, got {wins}, {losses}, n={n}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    lower, upper = gain_bounds_array(np.array([wins]), np.array([losses]), n, alpha, rejects=np.array([
        sign_test_p(wins, losses) <= alpha]))
    return float(lower[0]), float(upper[0])


def gain_bounds_array(
    wins: Int[np.ndarray, " table"], losses: Int[np.ndarray, " table"], n: int, alpha: float = 0.05,
    rejects: Optional[Bool[np.ndarray, " table"]] = None,
) -> tuple[Float[np.ndarray, " table"], Float[np.ndarray, " table"]]:
    """:func:`gain_bounds` of many tables at once (``n`` examples each), for coverage studies:
    ``rejects`` is the decision of each (by default ``P(X >= wins) <= alpha`` in floating point,
    which :func:`sign_test_p` computes exactly)."""
    from scipy import stats as _st

    w, l = np.asarray(wins, dtype=np.int64), np.asarray(losses, dtype=np.int64)
    m = w + l
    a_d, a_q = alpha * DISCORDANCE_SHARE, alpha * (1 - DISCORDANCE_SHARE)
    with np.errstate(all="ignore"):
        d_low = np.where(m > 0, _st.beta.ppf(a_d, m, n - m + 1), 0.0)
        d_high = np.where(m < n, _st.beta.ppf(1 - a_d, m + 1, n - m), 1.0)
        q_low = np.where(w > 0, _st.beta.ppf(a_q, w, l + 1), 0.0)
        q_high = np.where(l > 0, _st.beta.ppf(1 - a_q, w + 1, l), 1.0)
    lo, hi = 2 * q_low - 1, 2 * q_high - 1
    lower = lo * np.where(lo >= 0, d_low, d_high)
    upper = hi * np.where(hi >= 0, d_high, d_low)
    if rejects is None:
        rejects = (m > 0) & (_st.binom.sf(w - 1, m, 0.5) <= alpha)
    return np.where(rejects, np.maximum(lower, 0.0), lower), upper


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


def sign_test_power_random(n: int, discordance: float, gain: float, alpha: float = 0.05) -> float:
    """Power of :func:`sign_test_p` at level ``alpha`` for a true gain ``gain`` when each of the
    ``n`` examples is discordant with probability ``discordance`` (their number random,
    ``Binomial(n, discordance)``, not fixed at the observed count as in :func:`sign_test_power`)."""
    from scipy import stats as _st

    if discordance <= 0 or gain <= -discordance:
        return 0.0
    ms = np.arange(n + 1)
    pm = _st.binom.pmf(ms, n, discordance)
    keep = (pm > 1e-14) & (ms > 0)
    ms, pm = ms[keep], pm[keep]
    k = _st.binom.isf(alpha, ms, 0.5) + 1  # fewest wins with P(X >= k) <= alpha under no effect
    q = min(1.0, (1 + gain / discordance) / 2)
    return float((pm * np.where(k <= ms, _st.binom.sf(k - 1, ms, q), 0.0)).sum())


def minimum_detectable_effect_random(
    n: int, discordance: float, alpha: float = 0.05, power: float = 0.8
) -> Optional[float]:
    """:func:`minimum_detectable_effect` with the number of discordant examples random
    (:func:`sign_test_power_random`): what the test detects when the discordance is a rate of the
    population, not the count this sample happened to show. ``None`` when no gain up to
    ``discordance`` reaches ``power``."""
    if n <= 0 or not 0 <= discordance <= 1:
        raise ValueError(f"need n > 0 and 0 <= discordance <= 1, got n={n}, discordance={discordance}")
    if discordance == 0 or sign_test_power_random(n, discordance, discordance, alpha) < power:
        return None
    lo, hi = 0.0, float(discordance)
    while hi - lo > 1e-6:
        mid = (lo + hi) / 2
        if sign_test_power_random(n, discordance, mid, alpha) >= power:
            hi = mid
        else:
            lo = mid
    return hi
