"""A small client for upstream attribution jobs: look up an outcome, publish a message.

    client = EvidenceClient.from_env()
    found = client.lookup(contract_version=..., answer=..., contexts=..., required_claim_ids=...,
                          grader=...)        # before paying for a grader call
    if found is None:
        client.publish(message)              # after grading

No Celery import is needed by the caller; messages are validated before they are sent, and
noted in the store's publish ledger first (worker/stores/contract.py), so `reconcile` can find
any that a broker loses. A publish that raises sent nothing (its note stays unconfirmed: nobody
will send it); one the broker took whose note the store could not confirm returns its task id
and logs a WARNING `evidence_coverage.ledger_unconfirmed`. With `sample_rate=R`, a client
sends only the messages whose case ID is in the deterministic sample at R
(contracts/sampling.py), the cases `publish --sample-rate R` would send.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from contracts import Attempt, AttributionResult
from contracts.hashing import hash_of, judgement_inputs
from contracts.messages import Context, Grader
from contracts.sampling import check_rate, sampled
from worker.errors import SentUnconfirmed
from worker.observability.logging import get_logger
from worker.settings import Settings, load_settings
from worker.stores import History, ResultStore, open_store
from worker.upstream.publishing import outgoing, send_noted


class EvidenceClient:
    """Reads the shared store and publishes to the worker's queue.

    `sample_rate`: None (the default) sends every message; a number in 0.0..1.0 sends only
    those whose case ID is sampled at it (ValueError for anything else).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: ResultStore | None = None,
        sample_rate: float | None = None,
    ) -> None:
        self.sample_rate = None if sample_rate is None else check_rate(sample_rate)
        self.settings = settings
        self.store = store or open_store(settings.result_store_url, settings)
        self._app: Any = None

    @classmethod
    def from_env(cls, *, sample_rate: float | None = None) -> EvidenceClient:
        return cls(load_settings(), sample_rate=sample_rate)

    def lookup(
        self,
        *,
        contract_version: str,
        answer: str,
        contexts: Sequence[Context | Mapping[str, Any]],
        required_claim_ids: Sequence[str],
        grader: Grader | Mapping[str, Any],
        expected_evidence: Mapping[str, Sequence[str]] | None = None,
    ) -> Attempt | None:
        """The first outcome already recorded for these inputs, or None; `expected_evidence`
        as the message will carry it (part of the inputs when given)."""
        history = self.history(
            hash_of(
                judgement_inputs(
                    contract_version=contract_version,
                    answer=answer,
                    contexts=[Context.model_validate(context) for context in contexts],
                    required_claim_ids=required_claim_ids,
                    grader=Grader.model_validate(grader),
                    expected_evidence=expected_evidence,
                )
            )
        )
        return history.first if history else None

    def history(self, input_hash: str) -> History | None:
        """Everything kept for one input hash (first outcome and attempts), or None."""
        return self.store.history(input_hash)

    def publish(self, message: AttributionResult | Mapping[str, Any]) -> str | None:
        """Validate, note in the publish ledger and send one message; returns the task id, or
        None when the sample rate leaves the message out (validated, neither noted nor sent)."""
        kept = self._sampled([self._validated(message)])
        return self._send(kept, batch=False) if kept else None

    def publish_batch(
        self, messages: Sequence[AttributionResult | Mapping[str, Any]]
    ) -> str | None:
        """Validate every message, note those the sample rate keeps, then send them as one
        score_batch task; returns its id, or None when the sample rate keeps none."""
        validated = [self._validated(message) for message in messages]
        kept = self._sampled(validated)
        if validated and not kept:
            return None
        return self._send(kept, batch=True)

    def _sampled(
        self, messages: list[tuple[AttributionResult, str]]
    ) -> list[tuple[AttributionResult, str]]:
        """The messages the sample rate keeps (all of them without one)."""
        if self.sample_rate is None:
            return messages
        rate = self.sample_rate
        return [(model, text) for model, text in messages if sampled(model.case_id, rate)]

    @staticmethod
    def _validated(message: AttributionResult | Mapping[str, Any]) -> tuple[AttributionResult, str]:
        """The model and its JSON text, sent as `publish` sends a line (see as_sent)."""
        model = (
            message
            if isinstance(message, AttributionResult)
            else AttributionResult.model_validate(message)
        )
        return model, model.model_dump_json(exclude_unset=True)

    def _send(self, messages: Sequence[tuple[AttributionResult, str]], *, batch: bool) -> str:
        if self._app is None:
            from worker.runtime.celery_app import create_app

            self._app = create_app(self.settings)
        task = outgoing(
            messages,
            batch=batch,
            max_message_bytes=self.settings.max_message_bytes,
            now=datetime.now(UTC),
        )
        try:
            send_noted(
                self._app,
                [task],
                queue=self.settings.queue,
                ledger=self.store if self.settings.ledger_ttl_seconds > 0 else None,
            )
        except SentUnconfirmed as error:
            # Sent: raising would have the caller send it again. Said, not hidden.
            get_logger().warning(
                "evidence_coverage.ledger_unconfirmed",
                task_id=task.task_id,
                case_ids=[entry.case_id for entry in task.entries],
                problem=str(error),
            )
        return task.task_id

    def close(self) -> None:
        self.store.close()
