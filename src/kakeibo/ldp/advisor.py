"""Which frequency oracle to use: the one with the least variance for (domain size, epsilon), within a
bandwidth (seed 003's summary of Wang et al. 2017, Sec. 5).

At frequency 0 the per-client variance factors are ``(d - 2 + e^eps) / (e^eps - 1)^2`` for direct encoding
(GRR) and ``4 e^eps / (e^eps - 1)^2`` for OUE and OLH, so GRR wins exactly when ``d < 3 e^eps + 2``;
otherwise OUE and OLH tie in variance and OLH sends ``O(log d)`` bits instead of ``d``. The advisor computes
the variances of kakeibo's actual oracles (rounded coins, prime bucket counts) rather than the idealised
formulas, so its choice matches what the estimators will really do.

>>> recommend_oracle(domain_size=4, epsilon=1).protocol
'GRR'
>>> recommend_oracle(domain_size=1024, epsilon=1).protocol  # OLH's prime g = 3 is 2.4% worse here
'OUE'
>>> recommend_oracle(domain_size=1024, epsilon=4).protocol  # equal variance, 18 bits instead of 1024
'OLH'
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ArgumentError
from ..privacy import Number
from .direct import GRR
from .framework import FrequencyOracle
from .hadamard import HadamardResponse
from .hashing import OLH
from .unary import OUE

__all__ = ["Recommendation", "recommend_oracle"]

_CANDIDATES: tuple[type[FrequencyOracle], ...] = (GRR, OLH, OUE, HadamardResponse)


@dataclass(frozen=True)
class Recommendation:
    """The chosen oracle, its variance per client at frequency 0 and its report size, and the runners-up."""

    oracle: FrequencyOracle
    variance_per_client: float
    report_bits: int
    alternatives: tuple[tuple[str, float, int], ...]

    @property
    def protocol(self) -> str:
        return self.oracle.protocol


def recommend_oracle(
    *, domain_size: int, epsilon: Number, bandwidth_bits: int | None = None
) -> Recommendation:
    """The least-variance oracle among GRR, OLH, OUE and Hadamard response whose report fits in
    ``bandwidth_bits`` (any size when None); ties go to the smaller report."""
    scored = []
    for cls in _CANDIDATES:
        oracle = cls(epsilon=epsilon, domain_size=domain_size)
        variance = float(oracle.count_variance(1, 0.0))
        scored.append((variance, oracle.report_bits, oracle))
    fitting = [s for s in scored if bandwidth_bits is None or s[1] <= bandwidth_bits]
    if not fitting:
        smallest = min(s[1] for s in scored)
        raise ArgumentError(
            f"no frequency oracle fits in {bandwidth_bits} bits per report (the smallest needs {smallest})."
        )
    # Variances within 0.5% count as equal (OUE and OLH differ only by rounding), then fewer bits win.
    best_variance = min(s[0] for s in fitting)
    variance, bits, oracle = min(
        (s for s in fitting if s[0] <= best_variance * 1.005), key=lambda s: (s[1], s[0])
    )
    others = tuple((o.protocol, v, b) for v, b, o in sorted(scored, key=lambda s: s[0]) if o is not oracle)
    return Recommendation(oracle=oracle, variance_per_client=variance, report_bits=bits, alternatives=others)
