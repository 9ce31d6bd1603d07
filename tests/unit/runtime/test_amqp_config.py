"""RabbitMQ brokers get quorum queues and publisher confirms; Redis brokers get neither."""

from __future__ import annotations

from typing import Any

import pytest
from amqp.exceptions import ChannelError, MessageNacked
from kombu.exceptions import OperationalError

from worker.constants import SCORE
from worker.runtime.celery_app import celery_config
from worker.settings import Settings
from worker.upstream.publishing import CONFIRM_TIMEOUT_SECONDS, send

AMQP_URL = "amqp://guest:guest@rabbit.example:5672//"


@pytest.mark.parametrize("scheme", ["amqp", "amqps"])
def test_an_amqp_broker_declares_quorum_queues_and_confirms_every_publish(scheme: str) -> None:
    """Every amqp scheme: quorum queues (default and created on demand), confirms, persistent."""
    config = celery_config(Settings(broker_url=f"{scheme}://guest:guest@rabbit.example//"))

    assert config["task_default_queue_type"] == "quorum"
    assert config["task_create_missing_queue_type"] == "quorum"
    assert config["worker_detect_quorum_queues"] is True
    assert config["task_default_delivery_mode"] == "persistent"
    assert config["broker_transport_options"]["confirm_publish"] is True


def test_a_redis_broker_keeps_celery_s_classic_defaults_and_no_confirms() -> None:
    """redis://: nothing of RabbitMQ's is set (kombu's Redis transport knows no confirms)."""
    config = celery_config(Settings(broker_url="redis://127.0.0.1:6379/0"))

    assert "task_default_queue_type" not in config
    assert "confirm_publish" not in config["broker_transport_options"]


def test_the_amqp_transport_options_keep_the_shared_ones() -> None:
    """confirm_publish is added to the transport options, not in place of them."""
    config = celery_config(Settings(broker_url=AMQP_URL, visibility_timeout_seconds=42))

    assert config["broker_transport_options"]["visibility_timeout"] == 42


class RefusingApp:
    """A Celery app stand-in whose send_task fails as kombu does when RabbitMQ refuses."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.options: dict[str, Any] = {}

    def send_task(self, name: str, **options: Any) -> None:
        self.options = options
        raise self.error


def nacked() -> OperationalError:
    try:
        raise OperationalError() from MessageNacked()
    except OperationalError as error:
        return error


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (nacked(), "the broker refused task .* for queue q \\(basic.nack\\): not queued"),
        (ChannelError("NO_ROUTE", 312), "no queue took task .* for queue q \\(NO_ROUTE\\)"),
    ],
)
def test_a_refused_publish_raises_naming_the_task(error: Exception, expected: str) -> None:
    """A nack or a returned mandatory message is an OperationalError that names the task."""
    app = RefusingApp(error)

    with pytest.raises(OperationalError, match=expected):
        send(app, SCORE, "{}", queue="q")

    assert (app.options["mandatory"], app.options["confirm_timeout"]) == (
        True,
        CONFIRM_TIMEOUT_SECONDS,
    )
