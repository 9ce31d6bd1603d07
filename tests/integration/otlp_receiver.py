"""An OTLP/HTTP receiver for tests: decodes what exporters send (protobuf) and keeps it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def value_of(any_value: AnyValue) -> Any:
    """An OTLP attribute value as the Python value it was."""
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(item) for item in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def attributes_of(key_values: Any) -> dict[str, Any]:
    return {item.key: value_of(item.value) for item in key_values}


@dataclass
class Received:
    """One span or log record with its resource's attributes, IDs as lowercase hex."""

    resource: dict[str, Any]
    name: str
    attributes: dict[str, Any]
    trace_id: str
    span_id: str
    parent_span_id: str = ""
    severity_number: int = 0


@dataclass
class Receiver:
    """Listens on 127.0.0.1 until closed; `spans` and `logs` fill as exports arrive."""

    spans: list[Received] = field(default_factory=list)
    logs: list[Received] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/v1/traces":
                    receiver.take_spans(ExportTraceServiceRequest.FromString(body))
                    reply = ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/logs":
                    receiver.take_logs(ExportLogsServiceRequest.FromString(body))
                    reply = ExportLogsServiceResponse().SerializeToString()
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *_: Any) -> None:
                """Quiet: pytest shows the test's own output."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def take_spans(self, request: ExportTraceServiceRequest) -> None:
        for resource_spans in request.resource_spans:
            resource = attributes_of(resource_spans.resource.attributes)
            for scope in resource_spans.scope_spans:
                self.spans += [
                    Received(
                        resource,
                        span.name,
                        attributes_of(span.attributes),
                        span.trace_id.hex(),
                        span.span_id.hex(),
                        span.parent_span_id.hex(),
                    )
                    for span in scope.spans
                ]

    def take_logs(self, request: ExportLogsServiceRequest) -> None:
        for resource_logs in request.resource_logs:
            resource = attributes_of(resource_logs.resource.attributes)
            for scope in resource_logs.scope_logs:
                self.logs += [
                    Received(
                        resource,
                        record.event_name,
                        attributes_of(record.attributes),
                        record.trace_id.hex(),
                        record.span_id.hex(),
                        severity_number=record.severity_number,
                    )
                    for record in scope.log_records
                ]

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def receiving() -> Iterator[Receiver]:
    receiver = Receiver()
    receiver.start()
    yield receiver
    receiver.close()
