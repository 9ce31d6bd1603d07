"""Exit codes of every command (SPEC §7); when several apply, the highest wins."""

from typing import Final

OK: Final = 0
POLICY_FAILURE: Final = 1  # a valid blocking row is below policy
INVALID: Final = 2  # invalid input or rows; configuration and usage errors
NONDETERMINISM: Final = 3  # same inputs, different outcome
UNRECORDED: Final = 3  # reconcile: published messages neither recorded nor dead-lettered
INTERRUPTED: Final = 130  # Ctrl-C: 128 + SIGINT, as shells report it
CLOSED_PIPE: Final = 141  # the reader of stdout went away: 128 + SIGPIPE, as shells report it
