"""How good a memory is against the best memory of its size (Towards a Formal Definition of Agent
Memory): a memory is a set of events, what it answers is the span Φ of that set, and U*(S), the
utility–capacity frontier, is the largest weighted share of queries a memory of S events answers.

Coverage counts every event; precision counts a span only when all its events are true. Their
difference for one memory is its water inflation; the precision frontier at its size minus its
precision is its memory-efficiency loss. The frontier is exact by exhaustive search when 2^n
memories are few enough (n: events in some span), and greedy otherwise (lazy gains, a heap)."""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

EXACT_LIMIT = 1 << 20          # exhaustive search when 2^n memories are at most this many …
EXACT_EVENTS = 24              # … and never beyond 2^24 (the scores of all memories are held at once)
GREEDY_BOUND = 1 - 1 / math.e  # greedy ≥ (1 − 1/e)·U*(S) for single-event spans (weighted max coverage)


@dataclass(frozen=True)
class Span:
    """Events that together generate one knowledge item, and the queries that item answers."""

    events: tuple[int, ...]
    answers: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class Problem:
    """Queries (weights summing to 1), events (true or false claims) and the spans they generate."""

    query_ids: tuple[str, ...]
    weights: np.ndarray
    event_ids: tuple[str, ...]
    truth: tuple[bool, ...]
    spans: tuple[Span, ...]

    @classmethod
    def build(cls, queries: Sequence[tuple[str, float]], events: Sequence[tuple[str, bool]],
              spans: Sequence[tuple[Sequence[str], Sequence[str]]]) -> "Problem":
        """From ids: ``queries`` (qid, weight ≥ 0), ``events`` (id, true), ``spans`` (event ids,
        qids answered). Weights are normalised to sum 1; a ValueError names what is wrong."""
        raw = np.array([weight for _, weight in queries], dtype=float)
        if raw.size == 0 or not np.all(np.isfinite(raw)) or np.any(raw < 0) or raw.max() <= 0:
            raise ValueError("queries need finite weights ≥ 0 with a positive sum")
        query_at = _positions([qid for qid, _ in queries], "query")
        event_at = _positions([eid for eid, _ in events], "event")
        built = []
        for members, answered in spans:
            unknown = [e for e in members if e not in event_at] + [q for q in answered if q not in query_at]
            if unknown or not members:
                raise ValueError(f"span {list(members)}: " + (f"unknown id {unknown[0]!r}" if unknown
                                                                else "no events"))
            built.append(Span(tuple(sorted({event_at[e] for e in members})),
                              tuple(sorted({query_at[q] for q in answered}))))
        raw = raw / raw.max()  # first to at most 1: huge weights (1e308) then sum to a finite total
        return cls(tuple(qid for qid, _ in queries), raw / raw.sum(), tuple(e for e, _ in events),
                   tuple(bool(t) for _, t in events), tuple(built))

    @cached_property
    def true_spans(self) -> tuple[Span, ...]:
        """The good span's generators: spans whose events are all true."""
        return tuple(s for s in self.spans if all(self.truth[e] for e in s.events))

    @property
    def synergy(self) -> int:
        """How many spans need several events (cross-event synergy)."""
        return sum(len(s.events) > 1 for s in self.spans)

    def event_index(self) -> dict[str, int]:
        return {eid: i for i, eid in enumerate(self.event_ids)}

    def utility(self, memory: Iterable[int], precise: bool = False) -> float:
        """Weighted share of queries answered by the span of ``memory`` (precision: true spans only)."""
        inside = set(memory)
        answered: set[int] = set()
        for span in self.true_spans if precise else self.spans:
            if all(e in inside for e in span.events):
                answered.update(span.answers)
        return float(self.weights[sorted(answered)].sum()) if answered else 0.0


def _positions(ids: Sequence[str], what: str) -> dict[str, int]:
    at: dict[str, int] = {}
    for i, name in enumerate(ids):
        if name in at:
            raise ValueError(f"duplicate {what} id {name!r}")
        at[name] = i
    return at


def useful_events(spans: Iterable[Span]) -> list[int]:
    """Events in some span; any other event adds nothing to a memory."""
    return sorted({e for span in spans for e in span.events})


@dataclass(frozen=True)
class GreedyCurve:
    """The greedy chain: ``order`` as picked, ``values[k]`` the utility of its first k events."""

    order: tuple[int, ...]
    values: tuple[float, ...]
    complete: bool      # every useful event was picked: larger sizes gain nothing more
    evaluations: int    # marginal gains computed (plain greedy needs about n²/2)
    method: str = "greedy"

    def value(self, size: int) -> float:
        return self.values[self._at(size)]

    def memory(self, size: int) -> tuple[int, ...]:
        return self.order[:self._at(size)]

    def exact_at(self, size: int) -> bool:
        """Greedy is optimal here too: the empty memory, the best single event, or every useful event."""
        return size <= 1 or (self.complete and size >= len(self.order))

    def _at(self, size: int) -> int:
        if size >= len(self.values) and not self.complete:
            raise ValueError(f"greedy chain stops at size {len(self.values) - 1}, not {size}")
        return min(size, len(self.values) - 1)


@dataclass(frozen=True)
class ExactCurve:
    """The optimum of each size: ``values[k]`` = U*(k) reached by ``memories[k]``."""

    values: tuple[float, ...]
    memories: tuple[tuple[int, ...], ...]
    subsets: int
    method: str = "exact"

    def value(self, size: int) -> float:
        return self.values[min(size, len(self.values) - 1)]

    def memory(self, size: int) -> tuple[int, ...]:
        return self.memories[min(size, len(self.memories) - 1)]


Curve = GreedyCurve | ExactCurve


def greedy(problem: Problem, spans: Sequence[Span], limit: int) -> GreedyCurve:
    """Pick, up to ``limit`` times, the event of largest marginal gain (ties, to 12 decimals: the
    first event).

    Lazy: the heap holds stale gains, recomputed only when on top. Gains shrink as queries get
    answered, and grow only when a span comes down to one missing event; that event is then pushed
    again with its new gain, so every heap key stays an upper bound and the picks equal plain greedy's."""
    answers = [np.asarray(span.answers, dtype=np.intp) for span in spans]
    spans_of: dict[int, list[int]] = {}
    parts: dict[int, list[np.ndarray]] = {}
    missing = [len(span.events) for span in spans]
    for i, span in enumerate(spans):
        for e in span.events:
            spans_of.setdefault(e, []).append(i)
            parts.setdefault(e, [])
        if len(span.events) == 1:
            parts[span.events[0]].append(answers[i])
    # ready[e]: queries answered by the spans whose only missing event is e
    ready = {e: np.unique(np.concatenate(p)) if p else np.empty(0, np.intp) for e, p in parts.items()}
    left = problem.weights.copy()  # weight of the queries not yet answered
    answerable = np.unique(np.concatenate(answers)) if answers else np.empty(0, np.intp)

    def gain(e: int) -> float:
        return float(left[ready[e]].sum())

    def key(g: float) -> float:  # gains equal to 12 decimals tie: the same queries' weights summed in
        return -round(g, 12)     # another order, or rescaled by a query no span answers, differ by an ulp

    heap = [(key(gain(e)), e) for e in sorted(spans_of)]
    heapq.heapify(heap)
    evaluations = len(heap)
    chosen: set[int] = set()
    order: list[int] = []
    values = [0.0]
    limit = min(limit, len(spans_of))
    while len(order) < limit and heap:
        _, e = heapq.heappop(heap)
        if e in chosen:
            continue
        g = gain(e)
        evaluations += 1
        if heap and (key(g), e) > heap[0]:
            heapq.heappush(heap, (key(g), e))
            continue
        if g == 0.0 and not left[answerable].any():
            break  # every query a span answers is answered: larger memories gain nothing
        chosen.add(e)
        order.append(e)
        values.append(values[-1] + g)
        left[ready[e]] = 0.0
        for i in spans_of[e]:
            missing[i] -= 1
            if missing[i] == 1:
                last = next(x for x in spans[i].events if x not in chosen)
                ready[last] = np.union1d(ready[last], answers[i])
                heapq.heappush(heap, (key(gain(last)), last))
                evaluations += 1
    return GreedyCurve(tuple(order), tuple(values), len(order) < limit or len(order) == len(spans_of),
                       evaluations)


def exhaustive(problem: Problem, spans: Sequence[Span]) -> ExactCurve:
    """U*(k) for every k by scoring all 2^n memories of the n useful events at once (bitmasks);
    ties go to the memory of smallest bitmask."""
    useful = useful_events(spans)
    n = len(useful)
    bit = {e: 1 << i for i, e in enumerate(useful)}
    masks = np.arange(1 << n, dtype=np.int64)
    answering: dict[int, set[int]] = {}
    for span in spans:
        mask = sum(bit[e] for e in span.events)
        for q in span.answers:
            answering.setdefault(q, set()).add(mask)
    groups: dict[frozenset[int], float] = {}  # queries answered by the same spans are scored once
    for q, span_masks in sorted(answering.items()):
        key = frozenset(span_masks)
        groups[key] = groups.get(key, 0.0) + float(problem.weights[q])
    utility = np.zeros(1 << n)
    for span_masks, weight in groups.items():
        answered = np.zeros(1 << n, dtype=bool)
        for mask in span_masks:
            answered |= (masks & mask) == mask
        utility[answered] += weight
    sizes = np.bitwise_count(masks)
    order = np.lexsort((-utility, sizes))
    best = order[np.searchsorted(sizes[order], np.arange(n + 1))]
    memories = tuple(tuple(useful[i] for i in range(n) if int(b) >> i & 1) for b in best)
    return ExactCurve(tuple(float(v) for v in utility[best]), memories, 1 << n)


@dataclass(frozen=True, eq=False)
class Frontier:
    """Both frontiers for sizes 0 … ``max_size``, with greedy beside them."""

    problem: Problem
    max_size: int
    coverage: Curve
    precision: Curve
    greedy_coverage: GreedyCurve
    greedy_precision: GreedyCurve
    seconds: float

    @property
    def method(self) -> str:
        return self.coverage.method

    def notes(self) -> list[str]:
        """What the numbers are: exact or greedy, and whether greedy's guarantee holds."""
        n = len(useful_events(self.problem.spans))
        if isinstance(self.coverage, ExactCurve):
            how = (f"exact: exhaustive search over all 2^{n} = {self.coverage.subsets:,} memories of "
                   f"the {n} events in some span; greedy shown beside it")
        else:
            how = (f"greedy: the 2^{n} memories of the {n} events in some span are too many to "
                   f"search (see --exact-limit); values are lower bounds of U*(S)")
        synergy = self.problem.synergy
        if synergy:
            bound = (f"no bound: {synergy} span(s) of several events (cross-event synergy) void "
                     f"greedy's (1 − 1/e) guarantee; greedy can be far below U*(S)")
        else:
            bound = (f"bound: every span is a single event, so greedy ≥ (1 − 1/e)·U*(S) "
                     f"≈ {GREEDY_BOUND:.3f}·U*(S)")
        return [how, bound]


def frontier(problem: Problem, max_size: int | None = None, exact_limit: int | None = None,
             reach: int = 0) -> Frontier:
    """U*(S) for S = 0 … ``max_size`` (default: every event), coverage and precision; greedy runs
    always, exhaustive search too when 2^n ≤ ``exact_limit``. ``reach``: a larger size to be able
    to read (a given memory's)."""
    started = time.perf_counter()
    total = len(problem.event_ids)
    max_size = total if max_size is None else max(0, min(max_size, total))
    limit = max(max_size, min(reach, total))
    greedy_coverage = greedy(problem, problem.spans, limit)
    greedy_precision = greedy(problem, problem.true_spans, limit)
    coverage: Curve = greedy_coverage
    precision: Curve = greedy_precision
    n = len(useful_events(problem.spans))
    if n <= EXACT_EVENTS and 1 << n <= (EXACT_LIMIT if exact_limit is None else exact_limit):
        coverage = exhaustive(problem, problem.spans)
        precision = exhaustive(problem, problem.true_spans)
    return Frontier(problem, max_size, coverage, precision, greedy_coverage, greedy_precision,
                    time.perf_counter() - started)


@dataclass(frozen=True)
class MemoryScore:
    """One memory against the frontier."""

    ids: tuple[str, ...]
    size: int
    coverage: float
    precision: float
    water_inflation: float  # coverage − precision: quality bought with false claims
    loss: float             # precision frontier at this size − precision
    method: str             # how U*(size) was found ("greedy": a lower bound, so loss is understated)


def score_memory(front: Frontier, memory: Sequence[int]) -> MemoryScore:
    """Size, coverage, precision, water inflation and memory-efficiency loss of ``memory``."""
    problem = front.problem
    memory = list(dict.fromkeys(memory))
    coverage = problem.utility(memory)
    precision = problem.utility(memory, precise=True)
    curve = front.precision
    exact = isinstance(curve, ExactCurve) or curve.exact_at(len(memory))
    # a greedy value is a lower bound of the frontier, and this memory is one of its size: the frontier
    # is at least its precision (a memory better than greedy's read a negative loss, drawn above it)
    frontier = curve.value(len(memory)) if exact else max(curve.value(len(memory)), precision)
    return MemoryScore(tuple(problem.event_ids[e] for e in memory), len(memory), coverage, precision,
                       coverage - precision, frontier - precision, "exact" if exact else "greedy")
