"""Running tallies the report fills as rows arrive, so its memory does not grow with them."""

from __future__ import annotations

import math


class ExactSum:
    """Shewchuk's exact running sum (the partials math.fsum keeps): math.fsum of the partials
    is math.fsum of every value added, so a mean from it is the one a list of values gives."""

    __slots__ = ("partials",)

    def __init__(self) -> None:
        self.partials: list[float] = []

    def add(self, x: float) -> None:
        partials = self.partials
        i = 0
        for partial in partials:
            x, y = (partial, x) if abs(x) < abs(partial) else (x, partial)
            high = x + y
            low = y - (high - x)
            if low:
                partials[i] = low
                i += 1
            x = high
        partials[i:] = [x]

    def total(self) -> float:
        return math.fsum(self.partials)


class ValueTally:
    """Count, exact sum, min and max of the values added (the first of equal extremes kept,
    as min() and max() keep it)."""

    __slots__ = ("count", "high", "low", "sum")

    def __init__(self) -> None:
        self.count = 0
        self.sum = ExactSum()
        self.low: float | None = None
        self.high: float | None = None

    def add(self, value: float) -> None:
        self.count += 1
        self.sum.add(value)
        if self.low is None or value < self.low:
            self.low = value
        if self.high is None or value > self.high:
            self.high = value

    def mean(self) -> float | None:
        return self.sum.total() / self.count if self.count else None
