"""worker.runtime.termination: a pool process's SIGTERM waits for the message in hand, in a
real process (the handler ends it as SIGTERM's default action would)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.timeout(60)


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )


def test_a_sigterm_while_finishing_ends_the_process_as_the_block_ends() -> None:
    done = run(
        """
        import os, signal
        from worker.runtime import termination
        termination.install()
        with termination.finishing():
            os.kill(os.getpid(), signal.SIGTERM)
            print("the record line", flush=True)
        print("after the block", flush=True)
        """
    )

    assert (done.returncode, done.stdout, done.stderr) == (-signal.SIGTERM, "the record line\n", "")


def test_nested_blocks_end_the_process_as_the_outer_one_ends() -> None:
    done = run(
        """
        import os, signal
        from worker.runtime import termination
        termination.install()
        with termination.finishing():
            with termination.finishing():
                os.kill(os.getpid(), signal.SIGTERM)
            print("outer still running", flush=True)
        print("after", flush=True)
        """
    )

    assert (done.returncode, done.stdout) == (-signal.SIGTERM, "outer still running\n")


def test_the_held_sigterm_goes_to_the_handler_that_was_there() -> None:
    """billiard's own (SystemExit, so finally blocks run) is set after the process's
    initializer: it is the one a held SIGTERM reaches as the block ends, and the one an
    unheld SIGTERM reaches at once."""
    done = run(
        """
        import os, signal, sys
        from worker.runtime import termination
        termination.install()
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(7))  # billiard's, later
        try:
            with termination.finishing():
                os.kill(os.getpid(), signal.SIGTERM)
                print("the record line", flush=True)
        except SystemExit as exit:
            print(f"then exit {exit.code}", flush=True)
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(8))
        with termination.finishing():
            pass
        os.kill(os.getpid(), signal.SIGTERM)
        print("never", flush=True)
        """
    )

    assert (done.returncode, done.stdout) == (8, "the record line\nthen exit 7\n")


def test_a_sigterm_outside_a_block_ends_the_process_at_once() -> None:
    done = run(
        """
        import os, signal
        from worker.runtime import termination
        termination.install()
        os.kill(os.getpid(), signal.SIGTERM)
        print("never", flush=True)
        """
    )

    assert (done.returncode, done.stdout) == (-signal.SIGTERM, "")


def test_a_store_outage_being_waited_out_is_given_up_once_sigterm_is_held() -> None:
    """The window is ten minutes; the write gives up at its next try after the SIGTERM (at
    most one backoff, 10 s), the task's error is a TransientError, and the process ends."""
    started = time.monotonic()
    done = run(
        """
        import os, signal, threading
        from worker.errors import TransientError
        from worker.runtime import termination
        from worker.stores.durable import DurableStore

        class Away:
            def count_delivery(self, task_id):
                raise TransientError("store away")

        store = DurableStore(Away(), window_seconds=600)
        termination.install()
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
        with termination.finishing():
            try:
                store.count_delivery("task-1")
            except TransientError as error:
                print(f"gave up: {error}", flush=True)
        """
    )

    assert (done.returncode, done.stdout) == (-signal.SIGTERM, "gave up: store away\n")
    assert time.monotonic() - started < 30
