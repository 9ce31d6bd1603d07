"""What crosses the wire: reviewed release rows and upstream attribution results (SPEC §2)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, model_validator
from pydantic_core import PydanticCustomError


def as_utc(moment: datetime) -> datetime:
    """The same instant in UTC, so that records fall on UTC days; a time without an offset
    (ISO 8601 allows one) is read as UTC."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment if moment.utcoffset() == UTC.utcoffset(None) else moment.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]


class Contract(BaseModel):
    """Base for wire models: unknown fields are rejected, values are never coerced silently.

    Strict mode everywhere except where JSON has no native type (datetimes, tuples), so
    the same rules hold whether a message arrives as JSON text or as a decoded dict.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ReleaseRow(Contract):
    """A reviewed fixture row checked by the release gate."""

    case_id: str = Field(min_length=1)
    # The lists' contents (blanks, duplicates, unknown IDs) are the metric's business.
    required_claim_ids: list[str]
    supported_claim_ids: list[str]
    contract_version: str | None = None
    blocking: bool = True
    policy_group: str = "default"


class Context(Contract):
    """One retrieved passage, in rank order."""

    document_id: str
    text: str


class Citation(Contract):
    """A claim tied to a document and a [start, end) character span of the answer."""

    claim_id: str
    document_id: str
    answer_span: tuple[StrictInt, StrictInt] = Field(strict=False)


class Grader(Contract):
    """The configuration of whatever decided which claims are supported."""

    name: str
    version: str
    model: str
    prompt: str
    params: dict[str, Any] = Field(default_factory=dict)


class AttributionResult(ReleaseRow):
    """The event an upstream attribution job publishes for one sample."""

    # StrictInt, not Literal[1]: a Literal compares by ==, and True == 1 in Python.
    schema_version: StrictInt = Field(default=1, ge=1, le=1)
    contract_version: str = Field(min_length=1)  # required here, optional on ReleaseRow
    answer: str
    contexts: list[Context]
    citations: list[Citation] = Field(default_factory=list)
    grader: Grader
    produced_at: UtcDatetime | None = Field(default=None, strict=False)
    trace_id: str | None = None
    # Reviewed data, like the required set: per required claim, the documents that hold its
    # evidence (SPEC §9). Hashed only when given; the metric never sees it.
    expected_evidence: dict[str, list[str]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _expected_evidence_names_required_claims(self) -> AttributionResult:
        if not self.expected_evidence:  # as on most messages: nothing to check
            return self
        required = {claim.strip() for claim in self.required_claim_ids}
        unknown = sorted({key.strip() for key in self.expected_evidence} - required)
        if unknown:
            # A lone surrogate (a legal JSON escape) spelled out: pydantic cannot report it.
            ids = ",".join(unknown).encode("utf-8", "backslashreplace").decode("utf-8")
            raise PydanticCustomError(
                "unknown_claim_ids",
                "expected_evidence names unknown claim IDs: {ids}",
                {"ids": ids},
            )
        return self
