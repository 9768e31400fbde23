"""Property tests: whatever the bytes, the wire layer raises only TransportErrors."""

from __future__ import annotations

import os
import struct
import uuid

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)

from fsm_consumer.transport import (
    CorrelationIdMismatch,
    FrameReader,
    FrameTooLarge,
    ProtocolDecodeError,
    RequestCodec,
    TransportError,
)

LIMIT = 1 << 16  # keep fuzzed allocations small
FUZZ = settings(
    max_examples=int(os.environ.get("FSM_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _api_versions(v):
    R = ApiVersionsResponse
    return R(
        version=v,
        error_code=0,
        throttle_time_ms=1,
        api_keys=[R.ApiVersion(api_key=1, min_version=4, max_version=17)],
        supported_features=[R.SupportedFeatureKey(name="f", min_version=1, max_version=2)],
    )


def _metadata(v):
    R = MetadataResponse
    P = R.MetadataResponseTopic.MetadataResponsePartition
    return R(
        version=v,
        throttle_time_ms=0,
        cluster_id="c",
        controller_id=1,
        brokers=[R.MetadataResponseBroker(node_id=1, host="h", port=1, rack=None)],
        topics=[
            R.MetadataResponseTopic(
                error_code=0,
                name="t",
                topic_id=uuid.uuid4(),
                is_internal=False,
                partitions=[
                    P(
                        error_code=0,
                        partition_index=0,
                        leader_id=1,
                        replica_nodes=[1],
                        isr_nodes=[1],
                        offline_replicas=[],
                    )
                ],
            )
        ],
    )


def _find_coordinator(v):
    R = FindCoordinatorResponse
    return R(
        version=v,
        error_code=0,
        node_id=1,
        host="h",
        port=1,
        coordinators=[R.Coordinator(key="g", node_id=1, host="h", port=1, error_code=0)],
    )


def _list_offsets(v):
    R = ListOffsetsResponse
    P = R.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
    return R(
        version=v,
        topics=[
            R.ListOffsetsTopicResponse(
                name="t", partitions=[P(partition_index=0, error_code=0, old_style_offsets=[1], timestamp=-1, offset=1)]
            )
        ],
    )


def _fetch(v):
    R = FetchResponse
    P = R.FetchableTopicResponse.PartitionData
    return R(
        version=v,
        session_id=1,
        responses=[
            R.FetchableTopicResponse(
                topic="t",
                topic_id=uuid.uuid4(),
                partitions=[
                    P(
                        partition_index=0,
                        error_code=0,
                        high_watermark=5,
                        aborted_transactions=None,
                        current_leader=P.LeaderIdAndEpoch(leader_id=1, leader_epoch=2),
                        records=b"\x00" * 61,
                    )
                ],
            )
        ],
    )


# (request class, response builder, version): flexible and non-flexible versions of each
CASES = (
    [(ApiVersionsRequest, _api_versions, v) for v in (0, 2, 3, 4)]
    + [(MetadataRequest, _metadata, v) for v in (1, 8, 9, 12)]
    + [(FindCoordinatorRequest, _find_coordinator, v) for v in (0, 3, 4)]
    + [(ListOffsetsRequest, _list_offsets, v) for v in (0, 5, 6)]
    + [(FetchRequest, _fetch, v) for v in (4, 11, 12, 16)]
)


def in_flight(case, codec: RequestCodec) -> tuple[int, bytes]:
    """Send the case's request; return its correlation id and the broker's framed answer."""
    request_cls, build, version = case
    correlation_id, _ = codec.encode(request_cls(version=version), "fuzz")
    response = build(version)
    response.with_header(correlation_id=correlation_id)
    return correlation_id, bytes(response.encode(header=True, framed=True))


def feed_in_chunks(reader: FrameReader, stream: bytes, cuts: list[int]) -> list[memoryview]:
    frames = []
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    for start, end in zip(bounds, bounds[1:], strict=False):
        frames.extend(reader.feed(stream[start:end]))
    return frames


@FUZZ
@given(chunks=st.lists(st.binary(max_size=80), max_size=12), cases=st.lists(st.sampled_from(CASES), max_size=4))
def test_random_bytes_raise_only_transport_errors(chunks, cases):
    reader, codec = FrameReader(LIMIT), RequestCodec()
    for case in cases:
        in_flight(case, codec)
    outcomes = []
    try:
        for chunk in chunks:
            for frame in reader.feed(chunk):
                try:
                    outcomes.append(codec.decode(frame).correlation_id)
                except TransportError as exc:
                    outcomes.append(type(exc))
    except FrameTooLarge as exc:
        assert not 0 <= exc.size <= LIMIT
    assert all(isinstance(o, int) or issubclass(o, TransportError) for o in outcomes)


@FUZZ
@given(case=st.sampled_from(CASES), body=st.binary(max_size=200))
def test_random_body_with_right_correlation_id(case, body):
    codec = RequestCodec()
    correlation_id, _ = in_flight(case, codec)
    try:
        decoded = codec.decode(struct.pack(">i", correlation_id) + body)
    except ProtocolDecodeError:
        pass
    else:
        assert decoded.correlation_id == correlation_id
    assert len(codec) == 0  # answered either way


@FUZZ
@given(case=st.sampled_from(CASES), data=st.data())
def test_truncated_body_is_a_decode_error(case, data):
    codec = RequestCodec()
    _, stream = in_flight(case, codec)
    payload = stream[4:]
    cut = data.draw(st.integers(1, len(payload)))
    [frame] = FrameReader(LIMIT).feed(struct.pack(">i", len(payload) - cut) + payload[:-cut])
    try:
        codec.decode(frame)
    except ProtocolDecodeError:
        return
    raise AssertionError(f"truncating {cut} of {len(payload)} bytes went unnoticed")


@FUZZ
@given(case=st.sampled_from(CASES), data=st.data())
def test_flipped_bytes_raise_only_transport_errors(case, data):
    codec = RequestCodec()
    correlation_id, stream = in_flight(case, codec)
    payload = bytearray(stream[4:])
    flips = data.draw(
        st.lists(st.tuples(st.integers(0, len(payload) - 1), st.integers(1, 255)), min_size=1, max_size=6)
    )
    for index, mask in flips:
        payload[index] ^= mask
    [frame] = FrameReader(LIMIT).feed(struct.pack(">i", len(payload)) + bytes(payload))
    try:
        decoded = codec.decode(frame)
    except CorrelationIdMismatch:
        assert any(index < 4 for index, _ in flips)
    except ProtocolDecodeError:
        pass
    else:
        assert decoded.correlation_id == correlation_id


@FUZZ
@given(case=st.sampled_from(CASES), other=st.integers(-(2**31), 2**31 - 1))
def test_wrong_correlation_id_is_a_mismatch(case, other):
    codec = RequestCodec(node_id=9)
    correlation_id, stream = in_flight(case, codec)
    assume(other != correlation_id)
    [frame] = FrameReader(LIMIT).feed(stream[:4] + struct.pack(">i", other) + stream[8:])
    try:
        codec.decode(frame)
    except CorrelationIdMismatch as exc:
        assert (exc.expected, exc.received, exc.node_id) == (correlation_id, other, 9)
    else:
        raise AssertionError("mismatch not detected")
    assert len(codec) == 1


@FUZZ
@given(
    case=st.sampled_from(CASES),
    size=st.one_of(st.integers(LIMIT + 1, 2**31 - 1), st.integers(-(2**31), -1)),
    cuts=st.lists(st.integers(0, 10_000), max_size=4),
)
def test_bad_size_prefix_is_frame_too_large(case, size, cuts):
    _, stream = in_flight(case, RequestCodec())
    reader = FrameReader(LIMIT)
    try:
        feed_in_chunks(reader, struct.pack(">i", size) + stream[4:], cuts)
    except FrameTooLarge as exc:
        assert exc.size == size
    else:
        raise AssertionError("bad prefix accepted")


@FUZZ
@given(
    cases=st.lists(st.sampled_from(CASES), min_size=1, max_size=5),
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
    data=st.data(),
)
def test_valid_streams_decode_in_order_under_any_chunking(cases, cuts, data):
    codec = RequestCodec()
    sent = [in_flight(case, codec) for case in cases]
    stream = b"".join(frame for _, frame in sent)
    reader = FrameReader(LIMIT)
    frames = feed_in_chunks(reader, stream, cuts)
    assert [codec.decode(f).correlation_id for f in frames] == [cid for cid, _ in sent]
    assert not reader.partial and len(codec) == 0
    # A stream cut short yields nothing for the unfinished frame.
    cut = data.draw(st.integers(1, len(sent[-1][1]) - 1))
    tail_reader = FrameReader(LIMIT)
    assert len(tail_reader.feed(stream[:-cut])) == len(sent) - 1
    assert tail_reader.partial
