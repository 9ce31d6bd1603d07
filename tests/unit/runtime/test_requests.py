"""worker.runtime.request and publishing.written_here: what task events show of a scoring task's
arguments when the worker, not our publisher, describes them."""

from __future__ import annotations

from typing import Any

import pytest

from worker.constants import SCORE, SCORE_BATCH
from worker.runtime.request import described
from worker.upstream.publishing import written_here

HASH = "0" * 63 + "1"
BODY = {"case_id": "refund-001", "answer": "Returns within 30 days.", "contexts": []}


@pytest.mark.parametrize(
    ("task", "args", "kwargs", "expected"),
    [
        (SCORE, [BODY], {}, ("case_id=refund-001", "{}")),
        (SCORE, ['{"case_id": "as-text", "answer": "x"}'], {}, ("case_id=as-text", "{}")),
        (SCORE, [{"answer": "no id"}], {}, ("a message without a case_id", "{}")),
        (SCORE, ["not json"], {}, ("a message without a case_id", "{}")),
        (SCORE, [{"case_id": "x" * 120}], {}, ("case_id=" + "x" * 100 + "…", "{}")),
        (SCORE, [], {"message": BODY}, ("", "{'message': case_id=refund-001}")),
        (
            SCORE_BATCH,
            [[BODY, {"case_id": "b"}]],
            {},
            ("2 messages: case_id=refund-001, case_id=b", "{}"),
        ),
        (
            SCORE_BATCH,
            [[{"case_id": str(n)} for n in range(7)]],
            {},
            ("7 messages: case_id=0, case_id=1, case_id=2, case_id=3, case_id=4, … (+2)", "{}"),
        ),
        (SCORE_BATCH, [BODY], {}, ("not a list of messages", "{}")),
    ],
)
def test_described_names_case_ids_only(
    task: str, args: Any, kwargs: Any, expected: tuple[str, str]
) -> None:
    """Each message is its case ID (cut at 100 characters), a batch its count and first five."""
    assert described(task, args, kwargs) == expected


def test_described_is_bounded_as_celery_bounds_argsrepr() -> None:
    """Many positional messages still give at most 1,024 characters, as Celery's header."""
    argsrepr, _ = described(SCORE, [{"case_id": "c" * 100}] * 20, {})

    assert len(argsrepr) == 1024


@pytest.mark.parametrize(
    ("argsrepr", "kwargsrepr", "ours"),
    [
        (f"case_id=refund-001 input_hash={HASH}", "{}", True),
        (f"2 messages: case_id=a input_hash={HASH}, case_id=b input_hash={HASH}", "{}", True),
        ("a message that was not validated", "{}", True),
        (f"case_id=refund-001 input_hash={HASH}", "{'message': 1}", False),
        ("[{'case_id': 'refund-001', 'answer': 'Returns within 30 days.'}]", "{}", False),
        ("case_id=refund-001", "{}", False),
        ("", "", False),
        (None, None, False),
    ],
)
def test_written_here_recognises_only_what_send_noted_writes(
    argsrepr: object, kwargsrepr: object, ours: bool
) -> None:
    """Celery's repr of a message, or no header at all, is not ours: the worker replaces it."""
    assert written_here(argsrepr, kwargsrepr) is ours


@pytest.fixture
def request_of() -> Any:
    """Factory: the worker's Request for a scoring task message with these headers."""
    from celery.contrib.testing.mocks import TaskMessage

    from worker.runtime.celery_app import create_app
    from worker.runtime.request import NamedByCase
    from worker.settings import Settings

    app = create_app(Settings())

    def build(args: list[Any], **headers: Any) -> NamedByCase:
        return NamedByCase(TaskMessage(SCORE, args=args, **headers), app=app)

    return build


def test_a_request_without_argsrepr_is_named_by_case_id(request_of: Any) -> None:
    """No header: the request, and the dict the pool's trace logs with, name the case ID."""
    request = request_of([BODY])

    assert (request.argsrepr, request.kwargsrepr) == ("case_id=refund-001", "{}")
    assert request.request_dict["argsrepr"] == "case_id=refund-001"
    assert request.request_dict["kwargsrepr"] == "{}"


def test_celery_s_repr_of_the_message_is_replaced(request_of: Any) -> None:
    """A plain send_task's argsrepr (the message's repr) does not reach events or logs."""
    request = request_of([BODY], argsrepr=repr([BODY]), kwargsrepr="{}")

    assert request.argsrepr == "case_id=refund-001"


def test_our_publisher_s_argsrepr_is_kept(request_of: Any) -> None:
    """What send_noted writes (case ID and input hash) stays as it came."""
    ours = f"case_id=refund-001 input_hash={HASH}"

    request = request_of([BODY], argsrepr=ours, kwargsrepr="{}")

    assert request.argsrepr == ours


@pytest.mark.parametrize("safe", [False, True])
def test_remote_control_reports_the_argsrepr_not_the_message(request_of: Any, safe: bool) -> None:
    """`inspect active` asks for info(safe=False), which in Celery holds the arguments."""
    info = request_of([BODY]).info(safe=safe)

    assert (info["args"], info["kwargs"]) == ("case_id=refund-001", "{}")
