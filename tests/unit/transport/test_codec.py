"""RequestCodec: request encoding, correlation, and response round trips.

Responses are built and encoded with kafka-python's own classes (as a
broker would send them), framed, and fed back through FrameReader + decode.
"""

from __future__ import annotations

import struct
import uuid

import pytest
from kafka.protocol.consumer import FetchResponse, ListOffsetsResponse
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from fsm_consumer.transport import (
    ApiVersionTable,
    CorrelationIdMismatch,
    FrameReader,
    ProtocolDecodeError,
    RequestCodec,
    UnsupportedVersion,
)
from fsm_consumer.transport._versions import request_class

TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def record_batch() -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for i in range(3):
        builder.append(timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v%d" % i, headers=[])
    builder.close()
    return bytes(builder.buffer())


def api_versions_response(v: int) -> ApiVersionsResponse:
    R = ApiVersionsResponse
    return R(
        version=v,
        error_code=0,
        api_keys=[
            R.ApiVersion(api_key=1, min_version=4, max_version=17),
            R.ApiVersion(api_key=18, min_version=0, max_version=4),
        ],
        throttle_time_ms=5,
        # tagged fields (v3+): exercise kafka-python's tagged-field decoding
        supported_features=[R.SupportedFeatureKey(name="metadata.version", min_version=1, max_version=20)],
        finalized_features_epoch=3,
    )


def metadata_response(v: int) -> MetadataResponse:
    R = MetadataResponse
    return R(
        version=v,
        throttle_time_ms=1,
        brokers=[R.MetadataResponseBroker(node_id=1, host="b1", port=9092, rack="r1")],
        cluster_id="cluster",
        controller_id=1,
        topics=[
            R.MetadataResponseTopic(
                error_code=0,
                name="t",
                topic_id=TOPIC_ID,
                is_internal=False,
                partitions=[
                    R.MetadataResponseTopic.MetadataResponsePartition(
                        error_code=0,
                        partition_index=0,
                        leader_id=1,
                        leader_epoch=3,
                        replica_nodes=[1, 2],
                        isr_nodes=[1],
                        offline_replicas=[2],
                    )
                ],
            )
        ],
    )


def find_coordinator_response(v: int) -> FindCoordinatorResponse:
    R = FindCoordinatorResponse
    return R(
        version=v,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        node_id=2,
        host="coord",
        port=9093,
        coordinators=[R.Coordinator(key="group", node_id=2, host="coord", port=9093, error_code=0, error_message=None)],
    )


def list_offsets_response(v: int) -> ListOffsetsResponse:
    R = ListOffsetsResponse
    P = R.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
    return R(
        version=v,
        throttle_time_ms=0,
        topics=[
            R.ListOffsetsTopicResponse(
                name="t",
                partitions=[
                    P(partition_index=0, error_code=0, old_style_offsets=[42], timestamp=-1, offset=42, leader_epoch=1)
                ],
            )
        ],
    )


def fetch_response(v: int, records: bytes | None = None) -> FetchResponse:
    R = FetchResponse
    T = R.FetchableTopicResponse
    P = T.PartitionData
    return R(
        version=v,
        throttle_time_ms=0,
        error_code=0,
        session_id=9,
        responses=[
            T(
                topic="t",
                topic_id=TOPIC_ID,
                partitions=[
                    P(
                        partition_index=0,
                        error_code=0,
                        high_watermark=3,
                        last_stable_offset=3,
                        log_start_offset=0,
                        aborted_transactions=[],
                        preferred_read_replica=-1,
                        current_leader=P.LeaderIdAndEpoch(leader_id=1, leader_epoch=4),  # tagged (v12+)
                        records=record_batch() if records is None else records,
                    )
                ],
            )
        ],
    )


BUILDERS = {
    ApiVersionsResponse: api_versions_response,
    MetadataResponse: metadata_response,
    FindCoordinatorResponse: find_coordinator_response,
    ListOffsetsResponse: list_offsets_response,
    FetchResponse: fetch_response,
}
CASES = [(cls, v) for cls in BUILDERS for v in range(cls.max_version + 1)]


def essentials(response):
    """A few decoded values per API, to check beyond byte equality."""
    v = response.version
    if isinstance(response, ApiVersionsResponse):
        return [(k.api_key, k.min_version, k.max_version) for k in response.api_keys]
    if isinstance(response, MetadataResponse):
        topic = response.topics[0]
        return (
            response.brokers[0].host,
            topic.name,
            topic.partitions[0].isr_nodes,
            topic.topic_id if v >= 10 else None,
        )
    if isinstance(response, FindCoordinatorResponse):
        return response.coordinators[0].host if v >= 4 else response.host
    if isinstance(response, ListOffsetsResponse):
        partition = response.topics[0].partitions[0]
        return partition.old_style_offsets if v == 0 else partition.offset
    if isinstance(response, FetchResponse):
        return bytes(response.responses[0].partitions[0].records)
    raise AssertionError(response)


def send(codec: RequestCodec, response_cls, version: int):
    """Encode a request for ``response_cls``'s API at ``version``; return its correlation id."""
    request = request_class(response_cls.API_KEY)(version=version)
    correlation_id, _ = codec.encode(request, "test-client")
    return correlation_id, request


def wire(response, correlation_id: int) -> bytes:
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


@pytest.mark.parametrize("response_cls, version", CASES, ids=lambda x: getattr(x, "__name__", x))
def test_response_round_trip(response_cls, version):
    codec = RequestCodec(node_id=3)
    correlation_id, request = send(codec, response_cls, version)
    sent = BUILDERS[response_cls](version)
    [frame] = FrameReader().feed(wire(sent, correlation_id))
    decoded = codec.decode(frame)
    assert decoded.correlation_id == correlation_id
    assert decoded.request is request
    assert type(decoded.response) is response_cls
    assert decoded.response.version == version
    # Nested structs built by hand carry no version, so compare re-encodings.
    assert bytes(decoded.response.encode()) == bytes(sent.encode())
    assert essentials(decoded.response) == essentials(sent)
    assert decoded.response.header.correlation_id == correlation_id
    assert len(codec) == 0


@pytest.mark.parametrize("version", [4, 11, 12, 17, 18])
def test_fetch_records_survive_byte_at_a_time_delivery(version):
    codec = RequestCodec()
    correlation_id, _ = send(codec, FetchResponse, version)
    reader = FrameReader()
    stream = wire(fetch_response(version), correlation_id)
    frames = [f for i in range(len(stream)) for f in reader.feed(stream[i : i + 1])]
    [frame] = frames
    partition = codec.decode(frame).response.responses[0].partitions[0]
    records = list(MemoryRecords(partition.records).next_batch())
    assert [(r.key, r.value) for r in records] == [(b"k0", b"v0"), (b"k1", b"v1"), (b"k2", b"v2")]


@pytest.mark.parametrize("version", [0, 9, 12])  # 9+ uses the flexible request header
def test_request_encoding_matches_kafka_python_header(version):
    codec = RequestCodec()
    request = MetadataRequest(version=version, topics=[MetadataRequest.MetadataRequestTopic(name="t")])
    correlation_id, data = codec.encode(request, "me")
    assert struct.unpack_from(">i", data)[0] == len(data) - 4
    decoded = MetadataRequest.decode(bytes(data), version=version, header=True, framed=True)
    header = decoded.header
    assert (header.request_api_key, header.request_api_version) == (3, version)
    assert (header.correlation_id, header.client_id) == (correlation_id, "me")
    assert [t.name for t in decoded.topics] == ["t"]


def test_correlation_ids_increase_and_wrap():
    codec = RequestCodec()
    ids = [codec.encode(ApiVersionsRequest(version=0), None)[0] for _ in range(3)]
    assert ids == [1, 2, 3]
    assert len(codec) == 3
    codec._next_id = 2**31 - 1
    assert codec.encode(ApiVersionsRequest(version=0), None)[0] == 0


def test_responses_decode_in_send_order():
    codec = RequestCodec()
    first, _ = send(codec, MetadataResponse, 12)
    second, _ = send(codec, FindCoordinatorResponse, 4)
    stream = wire(metadata_response(12), first) + wire(find_coordinator_response(4), second)
    decoded = [codec.decode(f) for f in FrameReader().feed(stream)]
    assert [d.correlation_id for d in decoded] == [first, second]
    assert isinstance(decoded[0].response, MetadataResponse)
    assert decoded[1].response.coordinators[0].host == "coord"


def test_out_of_order_response_is_a_mismatch():
    codec = RequestCodec(node_id=5)
    first, _ = send(codec, MetadataResponse, 1)
    second, _ = send(codec, MetadataResponse, 1)
    [frame] = FrameReader().feed(wire(metadata_response(1), second))
    with pytest.raises(CorrelationIdMismatch) as info:
        codec.decode(frame)
    assert (info.value.expected, info.value.received, info.value.node_id) == (first, second, 5)
    assert len(codec) == 2  # nothing was consumed


def test_response_with_nothing_in_flight():
    [frame] = FrameReader().feed(wire(metadata_response(1), 1))
    with pytest.raises(CorrelationIdMismatch) as info:
        RequestCodec().decode(frame)
    assert info.value.expected is None and info.value.received == 1


def test_truncated_body_is_detected():
    # kafka-python's own decode would return a short `records` value here.
    codec = RequestCodec()
    correlation_id, _ = send(codec, FetchResponse, 11)
    payload = wire(fetch_response(11), correlation_id)[4:]
    with pytest.raises(ProtocolDecodeError, match="FetchRequest v11"):
        codec.decode(payload[:-5])


def test_trailing_bytes_are_detected():
    codec = RequestCodec()
    correlation_id, _ = send(codec, MetadataResponse, 5)
    payload = wire(metadata_response(5), correlation_id)[4:]
    with pytest.raises(ProtocolDecodeError, match="trailing bytes"):
        codec.decode(payload + b"\x00")


def test_frame_shorter_than_a_correlation_id():
    codec = RequestCodec()
    send(codec, MetadataResponse, 1)
    with pytest.raises(ProtocolDecodeError, match="no correlation id"):
        codec.decode(b"\x00\x00")


def test_flexible_response_header_tags_are_skipped():
    codec = RequestCodec()
    correlation_id, _ = send(codec, MetadataResponse, 12)
    body = metadata_response(12).encode(version=12)
    # header v1: correlation id, then one unknown tagged field (tag 7, 2 bytes)
    payload = struct.pack(">i", correlation_id) + b"\x01\x07\x02ab" + bytes(body)
    decoded = codec.decode(payload)
    assert decoded.response.brokers[0].host == "b1"
    assert decoded.response.header.unknown_tags == {"_7": b"ab"}


def test_api_versions_v3_plus_uses_header_v0():
    # A flexible ApiVersions response has no tagged-field byte after the
    # correlation id; decoding it with header v1 would misread the body.
    codec = RequestCodec()
    correlation_id, _ = send(codec, ApiVersionsResponse, 4)
    payload = wire(api_versions_response(4), correlation_id)[4:]
    assert payload[4:6] == b"\x00\x00"  # error_code directly after the correlation id
    assert codec.decode(payload).response.api_keys[1].max_version == 4


def test_rejected_api_versions_is_answered_in_v0():
    codec = RequestCodec()
    correlation_id, _ = codec.encode(ApiVersionsRequest(version=4), "c")
    rejection = ApiVersionsResponse(
        version=0, error_code=35, api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=2)]
    )
    decoded = codec.decode(wire(rejection, correlation_id)[4:])
    assert decoded.response.version == 0 and decoded.response.error_code == 35
    with pytest.raises(UnsupportedVersion) as info:
        ApiVersionTable.from_response(decoded.response, node_id=1)
    assert info.value.retry_version == 2


def test_produce_without_acks_is_not_in_flight():
    codec = RequestCodec()
    codec.encode(ProduceRequest(version=3, acks=0, timeout_ms=100, topic_data=[]), "c")
    assert len(codec) == 0
    codec.encode(ProduceRequest(version=3, acks=1, timeout_ms=100, topic_data=[]), "c")
    assert len(codec) == 1


def test_drain_returns_in_flight_oldest_first():
    codec = RequestCodec()
    a, req_a = send(codec, MetadataResponse, 1)
    b, req_b = send(codec, FetchResponse, 4)
    assert codec.drain() == [(a, req_a), (b, req_b)]
    assert len(codec) == 0


def test_encode_rejects_unversioned_and_non_requests():
    codec = RequestCodec()
    with pytest.raises(ValueError, match="API_VERSION"):
        codec.encode(FindCoordinatorRequest(key="g"), "c")
    with pytest.raises(TypeError):
        codec.encode(metadata_response(1), "c")
    with pytest.raises(TypeError):
        codec.encode(b"raw", "c")
    assert len(codec) == 0


def test_decoded_unpacks_as_a_triple():
    codec = RequestCodec()
    correlation_id, request = send(codec, FindCoordinatorResponse, 0)
    cid, response, req = codec.decode(wire(find_coordinator_response(0), correlation_id)[4:])
    assert (cid, req) == (correlation_id, request)
    assert response.host == "coord"


def test_transport_errors_pickle_with_their_fields():
    import pickle

    from fsm_consumer.transport import FrameTooLarge, TransportError

    for error in (
        CorrelationIdMismatch(1, 2, node_id=4),
        FrameTooLarge(-1, 10, node_id=4),
        UnsupportedVersion("v", api_key=18, node_id=4, retry_version=2),
    ):
        restored = pickle.loads(pickle.dumps(error))
        assert isinstance(restored, TransportError) and type(restored) is type(error)
        assert restored.__dict__ == error.__dict__ and str(restored) == str(error)
        assert str(restored).startswith("[node 4] ")


@pytest.mark.parametrize("version", [4, 11, 12, 17, 18])
def test_fetch_records_are_views_of_the_frame_not_copies(version):
    codec = RequestCodec()
    correlation_id, _ = send(codec, FetchResponse, version)
    [frame] = FrameReader().feed(wire(fetch_response(version), correlation_id))
    records = codec.decode(frame).response.responses[0].partitions[0].records
    assert isinstance(records, memoryview) and records.obj is frame.obj  # the frame's own buffer
    assert bytes(records) == record_batch()
    # kafka-python's own decoder, left as it was: a copy
    sent = fetch_response(version)
    again = FetchResponse.decode(bytes(sent.encode()), version=version)
    assert type(again.responses[0].partitions[0].records) is bytes


@pytest.mark.parametrize("version", [4, 12])
@pytest.mark.parametrize("records", [None, b""])
def test_fetch_null_and_empty_records_decode_as_before(version, records):
    codec = RequestCodec()
    correlation_id, _ = send(codec, FetchResponse, version)
    sent = fetch_response(version)
    sent.responses[0].partitions[0].records = records
    [frame] = FrameReader().feed(wire(sent, correlation_id))
    got = codec.decode(frame).response.responses[0].partitions[0].records
    assert got is None if records is None else bytes(got) == b""


def test_prepare_compiles_a_requests_encoder_and_its_responses_decoders_ahead_of_the_first_send():
    """kafka-python compiles each (request, version) encoder and this codec each response's decoders at first use;
    prepare() does both now, so the first request of its kind pays nothing more than the next one."""
    from fsm_consumer.protocol import ShareAcknowledgeRequest, ShareAcknowledgeResponse
    from fsm_consumer.transport._codec import _decoders, prepare

    R, version = ShareAcknowledgeRequest, 1
    flexible = R.flexible_version_q(version)
    R._struct._compiled_encoders.pop((version, flexible, flexible), None)
    _decoders.cache_clear()
    prepare(R, version)
    assert (version, flexible, flexible) in R._struct._compiled_encoders
    assert _decoders.cache_info().currsize == 1
    compiled = dict(R._struct._compiled_encoders)
    codec = RequestCodec()
    codec.encode(R(group_id="g", member_id="m", share_session_epoch=1, topics=[], version=version), "c")
    assert R._struct._compiled_encoders == compiled  # nothing compiled again
    assert _decoders.cache_info().hits == 1  # the response's decoders: those prepare() made
    assert ShareAcknowledgeResponse[version] is not None
