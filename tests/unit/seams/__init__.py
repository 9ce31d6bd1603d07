"""Contract tests of the fast paths that stand in for a library's own code: each runs the
library's code path and the fast path on one table of inputs and fails on any difference."""
