"""core.broker.publish_frames: the bytes of a published message's frames, the same as pamqp
marshals them, for every shape a relay publishes and for those it leaves to pamqp."""

from __future__ import annotations

import time

import pamqp.frame
import pytest

from hiwallet.core.broker import OutgoingMessage, _pamqp_frames, publish_frames
from hiwallet.core.ids import new_id

pytestmark = pytest.mark.in_process

FRAME_MAX = 131_072 - 8  # aiormq's max_content_size at RabbitMQ's default frame_max


def _message(**changes: object) -> OutgoingMessage:
    fields: dict[str, object] = {
        "message_id": new_id(),
        "exchange": "hiwallet.topups",
        "routing_key": "0001:w:0190a8b0-0000-7000-8000-000000000001",
        "type": "TopupRecorded",
        "body": b'{"payment_id": "p-1", "amount_minor": 1000}',
        "headers": {},
        "correlation_id": None,
    }
    fields.update(changes)
    return OutgoingMessage(**fields)  # type: ignore[arg-type]


SHAPES = {
    "plain": _message(),
    "correlated": _message(correlation_id="corr-1"),
    "empty correlation": _message(correlation_id=""),
    "headers": _message(
        headers={"x-request-id": "a" * 32, "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    ),
    "headers out of order": _message(headers={"zeta": "1", "alpha": "2", "Mid": "3"}),
    "unicode": _message(routing_key="cüzdan-ş", headers={"not": "ğüşiöç ✓"}, type="Tür"),
    "empty header value": _message(headers={"x": ""}),
    "default exchange": _message(exchange=""),
    "empty body": _message(body=b""),
    "a body of two frames": _message(body=b"x" * (FRAME_MAX + 17)),
    "a body of exactly one frame": _message(body=b"y" * FRAME_MAX),
    "a long routing key": _message(routing_key="k" * 255),
    "an empty type": _message(type=""),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("app_id", ["topup-webhook", ""])
def test_the_frames_are_pamqps_bytes(name: str, app_id: str) -> None:
    message = SHAPES[name]
    now_s = int(time.time())
    ours = publish_frames(3, message, message.headers, now_s, app_id, FRAME_MAX)
    assert ours == _pamqp_frames(3, message, message.headers, now_s, app_id, FRAME_MAX)


def test_the_frames_read_back_as_the_message() -> None:
    message = _message(headers={"x-request-id": "r-1"}, correlation_id="c-1", body=b"z" * 300)
    data = publish_frames(1, message, message.headers, 1_700_000_000, "svc", 128)
    frames = []
    while data:
        consumed, channel, frame = pamqp.frame.unmarshal(data)
        frames.append(frame)
        assert channel == 1
        data = data[consumed:]
    method, header, *bodies = frames
    assert (method.exchange, method.routing_key, method.mandatory) == (
        message.exchange,
        message.routing_key,
        True,
    )
    props = header.properties
    assert header.body_size == 300 and [len(b.value) for b in bodies] == [128, 128, 44]
    assert (props.message_id, props.correlation_id, props.message_type, props.app_id) == (
        message.message_id,
        "c-1",
        "TopupRecorded",
        "svc",
    )
    assert props.headers == {"x-request-id": "r-1"} and props.delivery_mode == 2
    assert props.content_type == "application/json" and int(props.timestamp.timestamp()) == 1_700_000_000


@pytest.mark.parametrize(
    "headers",
    [
        {"n": 1},  # not text: pamqp encodes an integer
        {"k" * 129: "v"},  # pamqp truncates a long key (with a warning)
        {"long": "v" * 70_000},  # text is a long string: still ours
    ],
)
def test_what_is_not_ours_is_left_to_pamqp(headers: dict[str, object]) -> None:
    message = _message()
    ours = publish_frames(2, message, headers, 1_700_000_000, "svc", FRAME_MAX)
    assert ours == _pamqp_frames(2, message, headers, 1_700_000_000, "svc", FRAME_MAX)


def test_a_text_past_its_length_and_a_bad_exchange_are_refused_as_pamqp_refuses_them() -> None:
    with pytest.raises(TypeError):
        publish_frames(1, _message(routing_key="k" * 256), {}, 1_700_000_000, "svc", FRAME_MAX)
    with pytest.raises(ValueError):
        publish_frames(1, _message(exchange="no;semicolons"), {}, 1_700_000_000, "svc", FRAME_MAX)
