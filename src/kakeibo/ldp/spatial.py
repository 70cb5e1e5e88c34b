"""Personalized local differential privacy for spatial data: the PSDA framework of Chen, Li, Qin,
Kasiviswanathan and Jin, "Private Spatial Data Aggregation in the Local Setting" (ICDE 2016; seed 003,
sections "Private Spatial Data Collection", "Personalized Local Differential Privacy", "PSDA Framework").

* **Locations** are the leaves of a public hierarchy (:class:`LocationHierarchy`, e.g. a quadtree over a
  grid); every node is a region, the set of leaves below it.
* **Personalized LDP.** Each user picks a *safe region* ``tau`` (a node containing their location) and an
  ``epsilon``. A randomizer ``A`` is ``(tau, eps)``-PLDP for the user when for any two locations ``l, l'``
  *inside* ``tau`` and any set ``O`` of outputs, ``Pr[A(l) in O] <= e^eps Pr[A(l') in O]`` (Chen et al.,
  definition of PLDP; the equation of seed 003's "Personalized Local Differential Privacy"). With
  ``tau = root`` it is plain ``eps``-LDP. The spec ``(tau, eps)`` itself is sent in the clear: the server
  learns that the user is somewhere in ``tau``, and locations outside ``tau`` are not protected at all.
* **PCEP** (personalized count estimation protocol, :class:`PCEP`): for one group of users sharing a
  region and an epsilon, each user sends one randomized-response bit on a random row of a public ``+-1``
  projection of their location; the server recovers an unbiased count for every location of the region,
  with a high-probability bound on the largest error.
* **PSDA** (:class:`PSDA`): users with equal specs form clusters; clusters are merged greedily while that
  lowers the bound on ``max_l |s_hat_l - s_l|``; each final cluster runs PCEP at confidence
  ``beta / |C|`` and the server sums the clusters' estimates, so every bound holds at once with
  probability at least ``1 - beta``.

>>> import numpy as np
>>> tree = LocationHierarchy.grid(levels=2)            # a 4 x 4 grid, quadtree of 16 cells
>>> pcep = PCEP(epsilon=1, hierarchy=tree, region=tree.root)
>>> reports = pcep.randomize_locations(np.array([0, 5, 5, 15]), rng=np.random.default_rng(0))
>>> counts = pcep.estimate_locations(reports, beta=0.05)
>>> counts.counts.shape, bool(np.all(counts.bound > 0))
((16,), True)
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError, ArgumentTypeError
from ..mechanisms.base import Rng, check_beta
from ..noise import resolve_source
from ..noise.exact import uniform_below
from ..noise.source import RandomSource
from ..privacy import Number
from ._coins import bernoulli_words, flip_probability, unpack_bits
from .direct import value_dtype
from .estimates import SpatialCounts
from .framework import (
    FloatArray,
    FrequencyOracle,
    IntArray,
    check_domain_values,
    check_epsilon,
    check_payload_range,
)
from .hadamard import parity, walsh_hadamard
from .reports import Param, Reports

__all__ = ["PCEP", "PSDA", "LocationHierarchy", "SpatialCounts"]

BoolArray = NDArray[np.bool_]


# --- the location hierarchy ---------------------------------------------------------------------------


class LocationHierarchy:
    """A public tree whose leaves are the locations and whose nodes are the regions (safe regions).

    Built from a parent array: ``parents[v]`` is node ``v``'s parent and the root's entry is ``-1``. Nodes
    without children are the locations, numbered ``0 .. n_locations - 1`` in increasing node order.
    :meth:`grid` builds the quadtree (or any ``split x split`` tree) of a square grid.

    >>> tree = LocationHierarchy([-1, 0, 0, 1, 1, 2, 2])   # a root, two regions, four locations
    >>> tree.n_locations, tree.leaves(1).tolist(), tree.ancestors([3], depth=1).tolist()
    (4, [0, 1], [2])
    """

    def __init__(self, parents: ArrayLike) -> None:
        parent = _check_parents(parents)
        self._parents = parent
        self._depth = _node_depths(parent)
        has_child = np.zeros(parent.size, dtype=np.bool_)
        has_child[parent[parent >= 0]] = True
        self._leaf_nodes = np.flatnonzero(~has_child).astype(np.int64)
        self._ancestor = self._ancestor_table()
        for a in (self._parents, self._depth, self._leaf_nodes, self._ancestor):
            a.setflags(write=False)
        digest = hashlib.blake2b(parent.astype("<i8").tobytes(), digest_size=8, person=b"kakeibo-tree")
        self._fingerprint = digest.hexdigest()

    @classmethod
    def grid(cls, levels: int, split: int = 2) -> LocationHierarchy:
        """The hierarchy of a ``side x side`` grid, ``side = split ** levels``: every node covers a square
        block and has ``split^2`` children (``split = 2``: the quadtree of ``4^levels`` cells).

        Nodes are numbered level by level from the root (node 0), row-major within each level, so the
        cell in row ``r`` and column ``c`` is location ``r * side + c``.

        >>> tree = LocationHierarchy.grid(levels=2)
        >>> tree.n_nodes, tree.n_locations, tree.leaves(1).tolist()  # node 1: the top-left 2 x 2 block
        (21, 16, [0, 1, 4, 5])
        """
        for name, value, low in (("levels", levels, 1), ("split", split, 2)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ArgumentTypeError(f"{name} must be an integer, not {type(value).__name__}.")
            if value < low:
                raise ArgumentError(f"{name} must be at least {low}, got {value}.")
        if split ** (2 * levels) > 1 << 24:
            raise ArgumentError(f"a grid of {split}^{2 * levels} cells is too large (at most 2^24 cells).")
        parents = [np.array([-1], dtype=np.int64)]
        offset = 0
        for depth in range(1, levels + 1):
            side = split**depth
            rows, cols = np.divmod(np.arange(side * side, dtype=np.int64), side)
            parents.append(offset + (rows // split) * (side // split) + cols // split)
            offset += (side // split) ** 2
        return cls(np.concatenate(parents))

    def _ancestor_table(self) -> IntArray:
        """``table[i, d]``: location ``i``'s ancestor at depth ``d`` (``-1`` below the location's depth)."""
        table = np.full((self._leaf_nodes.size, int(self._depth.max()) + 1), -1, dtype=np.int64)
        rows = np.arange(self._leaf_nodes.size)
        node = self._leaf_nodes.copy()
        while rows.size:
            table[rows, self._depth[node]] = node
            node = self._parents[node]
            rows, node = rows[node >= 0], node[node >= 0]
        return table

    # -- description -----------------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return int(self._parents.size)

    @property
    def n_locations(self) -> int:
        return int(self._leaf_nodes.size)

    @property
    def root(self) -> int:
        return int(np.flatnonzero(self._parents < 0)[0])

    @property
    def parents(self) -> IntArray:
        """The parent array (read-only)."""
        return self._parents

    @property
    def depths(self) -> IntArray:
        """Each node's depth (the root has depth 0; read-only)."""
        return self._depth

    @property
    def fingerprint(self) -> str:
        """A 64-bit BLAKE2b digest of the parent array: reports name it, so a server with another tree
        refuses them."""
        return self._fingerprint

    def __repr__(self) -> str:
        return f"LocationHierarchy(n_nodes={self.n_nodes}, n_locations={self.n_locations})"

    # -- queries ---------------------------------------------------------------------------------------
    def check_nodes(self, nodes: ArrayLike, name: str = "nodes") -> IntArray:
        """``nodes`` (one node or a 1-d array of them) as an int64 array, or a one-sentence error."""
        arr = np.atleast_1d(np.asarray(nodes))
        if arr.ndim != 1 or arr.size == 0:
            raise ArgumentError(f"{name} must be one node or a non-empty 1-d array of nodes.")
        if arr.dtype.kind not in "iu":
            raise ArgumentTypeError(f"{name} must be integer node ids, got {arr.dtype}.")
        bad = (arr < 0) | (arr >= self.n_nodes)
        if bad.any():
            raise ArgumentError(
                f"{name}: unknown node {arr[bad][0]} (the hierarchy has nodes 0..{self.n_nodes - 1})."
            )
        return arr.astype(np.int64)

    def contains(self, nodes: ArrayLike, locations: ArrayLike) -> BoolArray:
        """Whether ``locations[i]`` lies in region ``nodes[i]`` (the two broadcast together)."""
        node = self.check_nodes(nodes)
        loc = check_domain_values(np.atleast_1d(np.asarray(locations)), self.n_locations, "locations")
        return np.asarray(self._ancestor[loc, self._depth[node]] == node)

    def leaves(self, node: int) -> IntArray:
        """The locations in region ``node``, in increasing order."""
        return np.flatnonzero(self.region_mask(node)).astype(np.int64)

    def region_mask(self, nodes: ArrayLike) -> BoolArray:
        """Which locations lie in the union of the regions ``nodes``."""
        checked = self.check_nodes(nodes)
        return np.asarray((self._ancestor[:, self._depth[checked]] == checked).any(axis=1))

    def ancestors(self, locations: ArrayLike, depth: int) -> IntArray:
        """Each location's ancestor at ``depth`` (0 is the root): e.g. a user's safe region at that level."""
        loc = check_domain_values(np.atleast_1d(np.asarray(locations)), self.n_locations, "locations")
        height = self._ancestor.shape[1] - 1
        if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or not 0 <= depth <= height:
            raise ArgumentError(f"depth must be an integer in 0..{height}, got {depth!r}.")
        found = self._ancestor[loc, depth]
        if (found < 0).any():
            raise ArgumentError(f"location {loc[found < 0][0]} is shallower than depth {depth}.")
        return np.asarray(found, dtype=np.int64)

    def outermost(self, nodes: ArrayLike) -> tuple[int, ...]:
        """The nodes of ``nodes`` that lie in no other of them, sorted: the same union of regions."""
        chosen = {int(v) for v in self.check_nodes(nodes).tolist()}
        return tuple(sorted(v for v in chosen if not chosen.intersection(self._strict_ancestors(v))))

    def _strict_ancestors(self, node: int) -> list[int]:
        out = []
        up = int(self._parents[node])
        while up >= 0:
            out.append(up)
            up = int(self._parents[up])
        return out


def _check_parents(parents: ArrayLike) -> IntArray:
    arr = np.asarray(parents)
    if arr.ndim != 1 or arr.size < 3:
        raise ArgumentError("parents must be a 1-d array of at least 3 nodes (a root and two locations).")
    if arr.dtype.kind not in "iu":
        raise ArgumentTypeError(f"parents must be integer node ids, got {arr.dtype}.")
    parent = arr.astype(np.int64)
    if np.count_nonzero(parent == -1) != 1:
        raise ArgumentError("parents must hold exactly one -1 (the root).")
    own = np.arange(parent.size)
    bad = (parent < -1) | (parent >= parent.size) | (parent == own)
    if bad.any():
        raise ArgumentError(f"node {own[bad][0]} has parent {parent[bad][0]}, which is not another node.")
    return parent


def _node_depths(parent: IntArray) -> IntArray:
    """Every node's depth, or a ``ValueError`` if some nodes never reach the root (a cycle)."""
    depth = np.full(parent.size, -1, dtype=np.int64)
    depth[parent < 0] = 0
    while (unknown := depth < 0).any():
        ready = unknown & (depth[np.maximum(parent, 0)] >= 0)
        if not ready.any():
            raise ArgumentError(
                f"parents has a cycle through node {np.flatnonzero(unknown)[0]}; it must be a tree."
            )
        depth[ready] = depth[parent[ready]] + 1
    return depth


# --- results ------------------------------------------------------------------------------------------


def _check_region_size(hierarchy: LocationHierarchy, nodes: tuple[int, ...]) -> BoolArray:
    """The locations of a region (a mask), or a ``ValueError`` if it has fewer than two."""
    mask = hierarchy.region_mask(nodes)
    if np.count_nonzero(mask) < 2:
        raise ArgumentError(f"region {nodes} holds fewer than two locations, so it hides nothing.")
    return mask


# --- PCEP: one cluster's count estimation ---------------------------------------------------------------


def hoeffding_bound(n: ArrayLike, scale: ArrayLike, locations: ArrayLike, beta: float) -> FloatArray:
    """``scale * sqrt(2 n ln(2 locations / beta))``: with probability at least ``1 - beta``, each of
    ``locations`` sums of ``n`` independent terms of range ``2 scale`` is within it of its mean
    (Hoeffding: ``P(|S - E S| >= t) <= 2 exp(-t^2 / (2 n scale^2))``, union over the locations)."""
    n_, scale_, size = (np.asarray(a, dtype=np.float64) for a in (n, scale, locations))
    return np.asarray(scale_ * np.sqrt(2 * n_ * np.log(2 * size / beta)), dtype=np.float64)


class PCEP(FrequencyOracle):
    """Personalized count estimation (Chen et al. 2016, PCEP) for one cluster: a region, an epsilon, and
    Bassily and Smith's (2015) one-bit randomizer over the region's locations.

    Let the region hold ``d`` locations (positions ``0 .. d-1`` in :attr:`locations` order) and
    ``K = 2^ceil(log2 d)``. The public projection is ``Phi[j, l] = (-1)^popcount(j & l)``, ``j < K``: the
    first ``d`` columns of the Sylvester-Hadamard matrix. A user at position ``l`` draws a row ``j``
    uniformly, and sends ``j`` with the sign ``Phi[j, l]`` kept with probability ``p`` and flipped
    otherwise (``p = e^eps / (e^eps + 1)``, the flip probability rounded up to a dyadic rational). The
    server estimates ``s_hat_l = c sum_i y_i Phi[j_i, l]`` with ``c = 1 / (2p - 1)``: Bassily and Smith's
    ``<Phi_l, z_bar>`` estimator, which PCEP uses.

    Chen et al., following Bassily and Smith, draw ``Phi`` at random (entries ``+-1/sqrt(m)``, ``m`` rows
    set from ``n``, ``eps`` and ``beta``), so their estimate also carries a random-projection
    (Johnson-Lindenstrauss) error. Here
    ``Phi`` is Hadamard (as in Bassily, Nissim, Stemmer and Thakurta 2017, for the same randomizer): public,
    described by ``K`` alone, with exactly orthogonal columns, so that error vanishes. Then, for a fixed
    set of users:

    * ``s_hat_l`` is unbiased and ``Var s_hat_l = n c^2 - s_l``; estimates of distinct locations are
      uncorrelated. As a pure frequency oracle (Wang et al. 2017) a report supports ``l`` when its bit
      matches ``Phi[j, l]``: ``p* = p``, ``q* = 1/2``, and Wang et al.'s Eq. (1) and (2) are these formulas.
    * Each user adds ``+-c`` to every ``s_hat_l``, so by Hoeffding and a union bound over the ``d``
      locations, ``max_l |s_hat_l - s_l| <= c sqrt(2 n ln(2 d / beta))`` with probability ``1 - beta``
      (:meth:`error_bound`): the paper's ``O(sqrt(n log(d / beta)) / eps)`` with explicit constants.

    Privacy, for the users of this cluster:

    * Neighbour relation (personalized local): any two locations inside the cluster's region. Locations
      outside it are not protected: the region travels with the reports (:attr:`params`).
    * Sensitivity: the report is one (row, bit) pair; two locations of the region give different signs on
      exactly half of the rows.
    * Privacy loss: ``PureDP(epsilon)`` per user with respect to the region's locations, i.e.
      ``(region, epsilon)``-PLDP; the coins' ratio ``(1 - q) / q <= e^eps`` is checked exactly.

    Values in the :class:`~.framework.FrequencyOracle` interface (:meth:`randomize`, :meth:`estimate`,
    :meth:`supports`...) are *positions* in the region; :meth:`randomize_locations` and
    :meth:`estimate_locations` speak in the hierarchy's locations.

    >>> tree = LocationHierarchy.grid(levels=2)
    >>> pcep = PCEP(epsilon=2, hierarchy=tree, region=[1, 2])    # two 2 x 2 blocks: 8 locations
    >>> pcep.locations.tolist(), pcep.rows, pcep.q_star
    ([0, 1, 2, 3, 4, 5, 6, 7], 8, 0.5)
    """

    protocol = "PCEP"
    neighbour = (
        "personalized local: any two locations inside the cluster's region (the region itself is public; "
        "locations outside it are not protected)"
    )

    def __init__(self, *, epsilon: Number, hierarchy: LocationHierarchy, region: ArrayLike) -> None:
        if not isinstance(hierarchy, LocationHierarchy):
            raise ArgumentTypeError(f"hierarchy must be a LocationHierarchy, not {type(hierarchy).__name__}.")
        nodes = hierarchy.outermost(hierarchy.check_nodes(region, "region"))
        mask = _check_region_size(hierarchy, nodes)
        super().__init__(epsilon=epsilon, domain_size=int(np.count_nonzero(mask)))
        self._flip = flip_probability(self._epsilon, "PCEP randomizer")
        self._hierarchy = hierarchy
        self._region = nodes
        self._locations = np.flatnonzero(mask).astype(np.int64)
        self._position = np.full(hierarchy.n_locations, -1, dtype=np.int64)
        self._position[self._locations] = np.arange(self._d)
        self._rows = 1 << (self._d - 1).bit_length()
        self._locations.setflags(write=False)

    # -- description -----------------------------------------------------------------------------------
    @property
    def hierarchy(self) -> LocationHierarchy:
        return self._hierarchy

    @property
    def region(self) -> tuple[int, ...]:
        """The region's outermost nodes (their union is the region)."""
        return self._region

    @property
    def locations(self) -> IntArray:
        """The region's locations in position order (read-only)."""
        return self._locations

    @property
    def rows(self) -> int:
        """``K``, the number of rows of the projection (a power of two, at least the region's size)."""
        return self._rows

    @property
    def p_star(self) -> float:
        return float(1 - self._flip)

    @property
    def q_star(self) -> float:
        return 0.5

    @property
    def report_bits(self) -> int:
        return self._rows.bit_length()  # log2 K bits of row and one bit of sign

    @property
    def scale(self) -> float:
        """``c = 1 / (2p - 1)``: each user adds ``+-c`` to every location's estimate."""
        return float(1 / (1 - 2 * self._flip))

    def _extra_params(self) -> dict[str, Param]:
        return {
            "p": str(1 - self._flip),
            "rows": self._rows,
            "region": ",".join(map(str, self._region)),
            "hierarchy": self._hierarchy.fingerprint,
        }

    def __repr__(self) -> str:
        return f"PCEP(epsilon={self.epsilon!r}, region={self._region}, locations={self._d})"

    # -- client ----------------------------------------------------------------------------------------
    def positions(self, locations: ArrayLike) -> IntArray:
        """Each location's position in the region, or a ``ValueError`` for a location outside it."""
        loc = check_domain_values(locations, self._hierarchy.n_locations, "locations")
        pos = self._position[loc]
        if (pos < 0).any():
            raise ArgumentError(
                f"location {loc[pos < 0][0]} lies outside this cluster's region {self._region}; "
                "PCEP only hides locations inside it."
            )
        return pos

    def randomize_locations(self, locations: ArrayLike, rng: Rng = None) -> Reports:
        """One ``(region, epsilon)``-PLDP report per user (``locations[i]`` is user ``i``'s location)."""
        return self.randomize(self.positions(locations), rng)

    def _perturb(self, values: IntArray, source: RandomSource) -> dict[str, NDArray[Any]]:
        n = values.size
        row = uniform_below(self._rows, n, source)
        flipped = unpack_bits(bernoulli_words(self._flip, -(-n // 64), source), n)
        bit = parity(row & values).astype(np.uint8) ^ flipped
        return {"row": row.astype(value_dtype(self._rows)), "bit": bit}

    # -- server ----------------------------------------------------------------------------------------
    def _check_payload(self, reports: Reports) -> None:
        check_payload_range(reports, "row", self._rows)
        check_payload_range(reports, "bit", 2)

    def _support_counts(self, reports: Reports) -> FloatArray:
        signs = 1.0 - 2.0 * reports["bit"].astype(np.float64)
        z_bar = np.bincount(reports["row"].astype(np.intp), weights=signs, minlength=self._rows).astype(
            np.float64
        )
        return np.asarray((reports.n + walsh_hadamard(z_bar)[: self._d]) / 2, dtype=np.float64)

    def _supports(self, reports: Reports, values: IntArray) -> BoolArray:
        sign = parity(reports["row"].astype(np.int64) & values)
        return np.asarray(reports["bit"] == sign)

    def error_bound(self, n: int, beta: float) -> float:
        """With probability at least ``1 - beta``, every location's estimate from ``n`` reports is within
        this of its true count: ``c sqrt(2 n ln(2 d / beta))`` (see the class docstring)."""
        return float(hoeffding_bound(n, self.scale, self._d, check_beta(beta)))

    def estimate_locations(self, reports: Reports, beta: float = 0.05) -> SpatialCounts:
        """Counts at every location of the hierarchy (exactly 0 outside the region, where none of these
        users is), with variances and the bound :meth:`error_bound` at confidence ``1 - beta``."""
        check_beta(beta)
        inside = self.estimate(reports)
        size = self._hierarchy.n_locations
        counts, variance, bound = np.zeros(size), np.zeros(size), np.zeros(size)
        counts[self._locations] = inside.counts
        variance[self._locations] = inside.variance
        bound[self._locations] = self.error_bound(reports.n, beta)
        for a in (counts, variance, bound):
            a.setflags(write=False)
        return SpatialCounts(
            counts=counts,
            variance=variance,
            n=reports.n,
            privacy_loss=self.privacy_loss,
            bound=bound,
            beta=beta,
        )


# --- PSDA: clustering and aggregation ------------------------------------------------------------------


class PSDA:
    """Private spatial data aggregation (Chen et al. 2016, PSDA framework) for users with personal specs.

    User ``i`` announces a safe region ``regions[i]`` (a node) and ``epsilons[i]``; the server groups the
    users and runs one :class:`PCEP` per group:

    1. Users with the same ``(region, epsilon)`` form the initial clusters.
    2. Clustering (the paper's user-group clustering): the error bound of cluster ``C`` with ``n_C`` users,
       region ``tau_C`` and ``eps_C`` is ``E_C = c(eps_C) sqrt(2 n_C ln(2 |tau_C| |C| / beta))``
       (:func:`hoeffding_bound` at confidence ``beta / |C|``, ``|C|`` the number of clusters), and the
       bound on location ``l``'s error is ``sum of E_C over the clusters whose region holds l``. Greedily,
       the pair of clusters whose merge gives the smallest maximum of that bound over the locations is
       merged -- region the union of the two, epsilon the smaller one -- as long as the maximum drops.
       A merge never weakens a member's guarantee: its region only grows and its epsilon only shrinks.
    3. Each final cluster runs PCEP at confidence ``beta / |C|``; the server adds the clusters' estimates,
       so every location's bound holds at once with probability at least ``1 - beta`` (union bound).

    The clustering uses only the announced specs, never a location, so it costs no privacy. What it lowers
    is the *bound*, Chen et al.'s objective, not the estimates' variance: a merge gives some users a
    smaller epsilon or a larger region, which only adds noise. The gain comes from bounding each cluster
    separately (a sum of square roots, which a merge shrinks) and from fewer clusters sharing ``beta``.

    * Neighbour relation (personalized local): for user ``i``, any two locations inside ``regions[i]``.
    * Privacy loss: user ``i``'s report is ``(regions[i], eps_C)``-PLDP with ``eps_C <= epsilons[i]`` (its
      cluster's PCEP, whose region contains ``regions[i]``), i.e. ``PureDP(epsilons[i])`` over the
      locations of its safe region. The spec itself is public.

    Cost of the clustering: ``O(k^3 A)`` for ``k`` distinct specs and ``A <= n_locations`` groups of
    locations covered by the same specs.

    >>> import numpy as np
    >>> tree = LocationHierarchy.grid(levels=2)
    >>> psda = PSDA(tree, regions=[0, 0, 1, 1], epsilons=[1, 1, 2, 2], beta=0.1)
    >>> [(c.region, c.epsilon) for c in psda.clusters]   # the nested specs are merged
    [((0,), 1.0)]
    """

    def __init__(
        self,
        hierarchy: LocationHierarchy,
        regions: ArrayLike,
        epsilons: ArrayLike,
        *,
        beta: float = 0.05,
        merge: bool = True,
    ) -> None:
        if not isinstance(hierarchy, LocationHierarchy):
            raise ArgumentTypeError(f"hierarchy must be a LocationHierarchy, not {type(hierarchy).__name__}.")
        self._hierarchy = hierarchy
        self._regions = hierarchy.check_nodes(regions, "regions")
        eps_values, eps_of_user = _check_user_epsilons(epsilons, self._regions.size)
        self._beta = check_beta(beta)
        for node in np.unique(self._regions).tolist():
            _check_region_size(hierarchy, (node,))
        specs, spec_of_user, spec_counts = np.unique(
            np.stack([self._regions, eps_of_user], axis=1), axis=0, return_inverse=True, return_counts=True
        )
        clusters = _SpecClusters(hierarchy, specs, eps_values, spec_counts, self._beta)
        if merge:
            clusters.merge_greedily()
        self._clusters = tuple(
            PCEP(epsilon=eps, hierarchy=hierarchy, region=nodes) for nodes, eps in clusters.final_specs()
        )
        self._assignment = clusters.cluster_of_spec()[spec_of_user.reshape(-1)]
        self._assignment.setflags(write=False)
        self._sizes = np.bincount(self._assignment, minlength=len(self._clusters))

    @property
    def hierarchy(self) -> LocationHierarchy:
        return self._hierarchy

    @property
    def beta(self) -> float:
        """The probability that some location's error exceeds its bound."""
        return self._beta

    @property
    def clusters(self) -> tuple[PCEP, ...]:
        """One PCEP per final cluster: its region, epsilon and projection are published to its users."""
        return self._clusters

    @property
    def assignment(self) -> IntArray:
        """The cluster of each user (read-only)."""
        return self._assignment

    @property
    def cluster_beta(self) -> float:
        """``beta / |C|``: each cluster's PCEP confidence parameter."""
        return self._beta / len(self._clusters)

    @property
    def error_bound(self) -> FloatArray:
        """The bound each location's estimate will carry when every user reports (the clustering's cost)."""
        bound = np.zeros(self._hierarchy.n_locations)
        for pcep, n in zip(self._clusters, self._sizes.tolist(), strict=True):
            bound[pcep.locations] += pcep.error_bound(n, self.cluster_beta)
        return bound

    @property
    def max_error_bound(self) -> float:
        """``max_l`` of :attr:`error_bound`: what the clustering minimises."""
        return float(self.error_bound.max())

    def __repr__(self) -> str:
        return f"PSDA(users={self._assignment.size}, clusters={len(self._clusters)}, beta={self._beta!r})"

    def randomize(self, locations: ArrayLike, rng: Rng = None) -> tuple[Reports, ...]:
        """Every user's report (client side; ``locations[i]`` is user ``i``'s location, which must lie in
        their safe region), as one batch per cluster holding its users in increasing order."""
        loc = check_domain_values(locations, self._hierarchy.n_locations, "locations")
        if loc.size != self._regions.size:
            raise ArgumentError(
                f"randomize needs one location per user ({self._regions.size}), got {loc.size}."
            )
        outside = np.flatnonzero(~self._hierarchy.contains(self._regions, loc))
        if outside.size:
            i = outside[0]
            raise ArgumentError(
                f"user {i}'s location {loc[i]} lies outside their safe region (node {self._regions[i]})."
            )
        source = resolve_source(rng)
        return tuple(
            pcep.randomize_locations(loc[self._assignment == c], source)
            for c, pcep in enumerate(self._clusters)
        )

    def estimate(self, batches: Sequence[Reports]) -> SpatialCounts:
        """Counts at every location: the sum of the clusters' PCEP estimates (at ``beta / |C|`` each), so
        all bounds hold at once with probability at least ``1 - beta``."""
        if len(batches) != len(self._clusters):
            raise ArgumentError(
                f"estimate needs one report batch per cluster ({len(self._clusters)}), got {len(batches)}."
            )
        return SpatialCounts.combine(
            [
                pcep.estimate_locations(b, self.cluster_beta)
                for pcep, b in zip(self._clusters, batches, strict=True)
            ]
        )


def _check_user_epsilons(epsilons: ArrayLike, n_users: int) -> tuple[list[Fraction], IntArray]:
    """The distinct epsilons (exact, increasing) and each user's index into them."""
    arr = np.asarray(epsilons)
    if arr.ndim != 1 or arr.size != n_users:
        raise ArgumentError(f"epsilons must be a 1-d array with one epsilon per user ({n_users}).")
    if arr.dtype.kind not in "iufO":
        raise ArgumentTypeError(f"epsilons must be numbers, got an array of {arr.dtype}.")
    distinct, index = np.unique(arr, return_inverse=True)
    return [check_epsilon(e.item() if isinstance(e, np.generic) else e) for e in distinct], index.reshape(-1)


class _SpecClusters:
    """The state of the greedy clustering: clusters of specs over the atoms (groups of locations that the
    same specs cover), with their users, epsilons and the bound of Chen et al.'s objective."""

    def __init__(
        self,
        hierarchy: LocationHierarchy,
        specs: IntArray,
        eps_values: list[Fraction],
        counts: IntArray,
        beta: float,
    ) -> None:
        self._hierarchy, self._eps_values, self._beta = hierarchy, eps_values, beta
        covers = np.array([hierarchy.region_mask([int(node)]) for node in specs[:, 0]])
        atoms, atom_of_location = np.unique(covers, axis=1, return_inverse=True)
        self._atom_sizes = np.bincount(atom_of_location.reshape(-1), minlength=atoms.shape[1])
        self._masks = atoms  # (clusters, atoms)
        self._eps_rank = specs[:, 1].copy()  # index into eps_values, which increase
        self._scale = np.array(
            [float(1 / (1 - 2 * flip_probability(e, "PCEP randomizer"))) for e in eps_values]
        )
        self._n = counts.astype(np.int64)
        self._members: list[list[int]] = [[i] for i in range(len(specs))]
        self._nodes: list[set[int]] = [{int(node)} for node in specs[:, 0]]

    def _bounds(self, n: IntArray, rank: IntArray, masks: BoolArray, clusters: int) -> FloatArray:
        return hoeffding_bound(n, self._scale[rank], masks @ self._atom_sizes, self._beta / clusters)

    def max_bound(self) -> float:
        k = len(self._members)
        return float((self._bounds(self._n, self._eps_rank, self._masks, k) @ self._masks).max())

    def _best_merge(self) -> tuple[float, int, int]:
        """The smallest maximum bound any single merge reaches, and the pair that reaches it."""
        k = len(self._members)
        own = self._bounds(self._n, self._eps_rank, self._masks, k - 1)
        base = own @ self._masks
        best = (math.inf, -1, -1)
        for a in range(k - 1):
            b = np.arange(a + 1, k)
            union = self._masks[a] | self._masks[b]
            merged = self._bounds(
                self._n[a] + self._n[b], np.minimum(self._eps_rank[a], self._eps_rank[b]), union, k - 1
            )
            errors = base - own[a] * self._masks[a] - own[b, None] * self._masks[b] + merged[:, None] * union
            worst = errors.max(axis=1)
            i = int(np.argmin(worst))
            if worst[i] < best[0]:
                best = (float(worst[i]), a, int(b[i]))
        return best

    def merge_greedily(self) -> None:
        current = self.max_bound()
        while len(self._members) > 1:
            value, a, b = self._best_merge()
            if not value < current:
                return
            self._merge(a, b)
            current = value

    def _merge(self, a: int, b: int) -> None:
        self._masks[a] |= self._masks[b]
        self._n[a] += self._n[b]
        self._eps_rank[a] = min(self._eps_rank[a], self._eps_rank[b])
        self._members[a] += self._members.pop(b)
        self._nodes[a] |= self._nodes.pop(b)
        self._masks = np.delete(self._masks, b, axis=0)
        self._n = np.delete(self._n, b)
        self._eps_rank = np.delete(self._eps_rank, b)

    def final_specs(self) -> list[tuple[tuple[int, ...], Fraction]]:
        """Each cluster's region (outermost nodes) and epsilon."""
        return [
            (self._hierarchy.outermost(sorted(nodes)), self._eps_values[int(r)])
            for nodes, r in zip(self._nodes, self._eps_rank, strict=True)
        ]

    def cluster_of_spec(self) -> IntArray:
        out = np.empty(sum(len(m) for m in self._members), dtype=np.int64)
        for c, members in enumerate(self._members):
            out[members] = c
        return out
