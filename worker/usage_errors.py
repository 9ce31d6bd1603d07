"""How every command line of the worker reports a usage error: two lines on stderr, what is
wrong and where the help is, and exit 2. argparse's own usage block before the error buries
the one line that matters under 25 others. Here, at the bottom layer, so that the health
check's light path (worker/runtime/health.py), which imports no command, shares it."""

from __future__ import annotations

import argparse
from typing import NoReturn

USAGE_EXIT_CODE = 2  # SPEC §7: invalid input, configuration and usage errors


class HelpfulParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage error is usage_error()'s two lines, then exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_EXIT_CODE, usage_error(self.prog, message))


def usage_error(prog: str, message: str) -> str:
    """What a usage error prints: the error, then the command to run for the options."""
    return f"{prog}: error: {message}\nrun '{prog} --help' for the options\n"
