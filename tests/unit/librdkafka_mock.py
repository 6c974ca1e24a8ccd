"""librdkafka's built-in mock cluster, in-process, for the contract tests of the fake clients.

confluent-kafka (2.16) exposes the mock cluster only as the ``test.mock.num.brokers``
property, which gives no handle to inject broker errors or delays; so this drives
librdkafka's C API (``rd_kafka_mock_*``) through ctypes, from the very library
confluent-kafka loaded. Clients join the cluster through :attr:`MockCluster.bootstrap`.
"""

from __future__ import annotations

import ctypes

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from devtools.harness import librdkafka_path

PRODUCE_API = 0  # Kafka's ApiKey of a ProduceRequest
MESSAGE_TOO_LARGE = 10  # the broker's MESSAGE_TOO_LARGE: a refusal of the record, not of the producer
INVALID_PRODUCER_EPOCH = 47  # a newer instance of a transactional id exists: the producer is fenced
BROKER = 1  # the one broker's id


def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(librdkafka_path())
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_size_t]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_mock_push_request_errors_array.argtypes = [
        ctypes.c_void_p, ctypes.c_int16, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)]
    lib.rd_kafka_mock_broker_set_rtt.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int]
    lib.rd_kafka_mock_partition_set_leader.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32,
                                                       ctypes.c_int32]
    return lib


class MockCluster:
    """One mock broker holding ``topic`` with ``partitions`` partitions; the handle owning it is private."""

    def __init__(self, topic: str, partitions: int = 1) -> None:
        lib = self._lib = _library()
        errstr = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        # The owning handle never connects anywhere: its "no bootstrap.servers" warning is noise.
        lib.rd_kafka_conf_set(conf, b"log_level", b"0", errstr, len(errstr))
        self._host = lib.rd_kafka_new(0, conf, errstr, len(errstr))
        assert self._host, errstr.value.decode()
        self._cluster = lib.rd_kafka_mock_cluster_new(self._host, 1)
        assert self._cluster
        self.bootstrap = lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode()
        self.topic = topic
        lib.rd_kafka_mock_topic_create(self._cluster, topic.encode(), partitions, 1)

    def refuse_next_produce(self) -> None:
        errors = (ctypes.c_int * 1)(MESSAGE_TOO_LARGE)
        self._lib.rd_kafka_mock_push_request_errors_array(self._cluster, PRODUCE_API, 1, errors)

    def fence_next_produces(self, count: int) -> None:
        """The next ``count`` produce requests answer "old epoch": a transactional producer is fenced (fatal)."""
        errors = (ctypes.c_int * count)(*([INVALID_PRODUCER_EPOCH] * count))
        self._lib.rd_kafka_mock_push_request_errors_array(self._cluster, PRODUCE_API, count, errors)

    def answer_after(self, rtt_ms: int) -> None:
        """The broker answers every request ``rtt_ms`` late (0: at once again)."""
        self._lib.rd_kafka_mock_broker_set_rtt(self._cluster, BROKER, rtt_ms)

    def lose_leader(self, partition: int = 0) -> None:
        """``partition`` has no leader: producers keep its records queued, and no error event is raised.

        (A broker set down would do too, but each refused reconnect queues an error event, and
        librdkafka counts those in ``len(producer)`` and in what ``flush`` returns.)
        """
        self._lib.rd_kafka_mock_partition_set_leader(self._cluster, self.topic.encode(), partition, -1)

    def restore_leader(self, partition: int = 0) -> None:
        self._lib.rd_kafka_mock_partition_set_leader(self._cluster, self.topic.encode(), partition, BROKER)

    def written(self, partition: int = 0) -> list[bytes]:
        """Every record value in ``partition``, read back with a consumer of its own."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "check", "enable.auto.commit": False,
                             "enable.partition.eof": True, "fetch.wait.max.ms": 10, "log_level": 0})
        consumer.assign([TopicPartition(self.topic, partition, OFFSET_BEGINNING)])  # no group join: milliseconds
        values: list[bytes] = []
        try:
            while True:
                msg = consumer.poll(10)
                assert msg is not None, "the mock cluster did not answer"
                if msg.error() is not None:
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    return values
                values.append(msg.value())
        finally:
            consumer.close()

    def close(self) -> None:
        self._lib.rd_kafka_mock_cluster_destroy(self._cluster)
        self._lib.rd_kafka_destroy(self._host)
