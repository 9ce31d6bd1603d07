"""`evidence-worker completion bash|zsh`: the shell's completion script for every command and
option, written by shtab from the parser itself, so it can never list an option that is gone
or miss a new one; the shell completes from it without running Python on each Tab."""

from __future__ import annotations

import argparse
from typing import Any

from worker.cli.arguments import PROG, describe
from worker.cli.exit_codes import OK
from worker.settings import Settings

SHELLS = ("bash", "zsh")


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "completion",
        **describe(
            "print the shell completion script (bash or zsh)",
            example="completion bash > ~/.local/share/bash-completion/completions/evidence-worker",
            details="Print the completion script of SHELL for every command and option. "
            "bash: save it as ~/.local/share/bash-completion/completions/evidence-worker (or "
            "`source <(evidence-worker completion bash)` in ~/.bashrc); zsh: save it as "
            "_evidence-worker in a directory of your $fpath.",
        ),
    )
    parser.add_argument("shell", metavar="SHELL", choices=SHELLS, help="bash or zsh")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    import shtab

    # The root parser, as the dispatcher passes it (worker/cli/__init__.py): importing it
    # from there would be an import cycle.
    script = shtab.complete(args.root_parser, shell=args.shell, root_prefix=PROG.replace("-", "_"))
    print(script)
    return OK
