"""Exactly-once mode's transaction outcomes: each of librdkafka's error classes asks the loop for one thing."""

from __future__ import annotations

import threading
import weakref
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from tests.unit.fakes import FakeTransactions
from ureplicator.worker import transactions
from ureplicator.worker.transactions import ABORTED, COMMITTED, FATAL, Transactions


class Log:
    def __init__(self) -> None:
        self.events: list[str] = []

    def info(self, event: str, **kw: Any) -> None:
        self.events.append(event)

    warning = error = info


class TxnError(KafkaError):
    """A KafkaError whose class flags a test sets (confluent-kafka's constructor cannot set txn_requires_abort)."""

    def __init__(self, code: int, *, fatal: bool = False, retriable: bool = False, abortable: bool = False) -> None:
        super().__init__(code, "test", fatal=fatal, retriable=retriable, txn_requires_abort=abortable)


class Producer(FakeTransactions):
    def __init__(self, fail_commit: KafkaError | None = None, fail_abort: KafkaError | None = None,
                 fail_offsets: KafkaError | None = None, offsets_answer: threading.Event | None = None) -> None:
        self.calls: list[str] = []
        self.offsets: list[TopicPartition] = []
        self.fail_commit = fail_commit
        self.fail_abort = fail_abort
        self.fail_offsets = fail_offsets
        # Set: send_offsets_to_transaction returns only once it is (librdkafka's group-coordinator hang)
        self.offsets_answer = offsets_answer


def opened(producer: Producer, clock: list[float] | None = None, log: Log | None = None,
           timeout_s: float = 30.0) -> Transactions:
    now = clock or [0.0]
    txn = Transactions(1.0, 1000, lambda: "group-metadata", log or Log(), clock=lambda: now[0], timeout_s=timeout_s,
                       overrun_s=0.0)
    assert txn.ready(producer)
    txn.begin(producer)
    return txn


def test_a_transaction_is_due_after_its_interval_or_once_the_bytes_cap_was_sent():
    clock = [0.0]
    txn = opened(Producer(), clock)
    assert not txn.due(0.5)
    assert txn.due(1.0)
    txn.bytes = 1000
    assert txn.due(0.1)


def test_a_commit_sends_the_positions_then_commits():
    producer = Producer()
    txn = opened(producer)
    offsets = [TopicPartition("dest", 0, 42)]
    assert txn.commit(producer, offsets) == COMMITTED
    assert producer.calls == ["init", "begin", "offsets", "commit"]
    assert producer.offsets == offsets and not txn.open


@pytest.mark.parametrize(("error", "outcome", "calls"), [
    # a commit that timed out costs the producer (resumed, it stays stuck); its outcome is in doubt
    (TxnError(KafkaError._TIMED_OUT, retriable=True), FATAL, ["init", "begin", "offsets", "commit"]),
    (TxnError(KafkaError._STATE, abortable=True), ABORTED, ["init", "begin", "offsets", "commit", "abort"]),
    (TxnError(KafkaError._FENCED, fatal=True), FATAL, ["init", "begin", "offsets", "commit"]),
])
def test_each_error_class_asks_for_its_own_recovery(error, outcome, calls):
    producer = Producer(fail_commit=error)
    txn = opened(producer)
    assert txn.commit(producer, [TopicPartition("dest", 0, 1)]) == outcome
    assert producer.calls == calls


def test_an_error_sending_the_positions_is_classified_like_a_commit_error():
    producer = Producer(fail_offsets=TxnError(KafkaError._STATE, abortable=True))
    txn = opened(producer)
    assert txn.commit(producer, [TopicPartition("dest", 0, 1)]) == ABORTED
    assert producer.calls == ["init", "begin", "offsets", "abort"]


def test_sending_the_positions_that_never_returns_gives_the_producer_up():
    # Given a send_offsets_to_transaction that ignores its timeout (librdkafka #5456/#5511)
    answer = threading.Event()
    producer, log = Producer(offsets_answer=answer), Log()
    txn = opened(producer, log=log, timeout_s=0.05)
    try:
        # When the positions are sent
        outcome = txn.commit(producer, [TopicPartition("dest", 0, 1)])
        # Then the loop gets its thread back: a new producer, whose init_transactions fences this one
        assert outcome == FATAL and "transaction_call_hung" in log.events
        assert "commit" not in producer.calls and not txn.open
        fresh = Producer()
        assert txn.ready(fresh) and fresh.calls == ["init"]
    finally:
        answer.set()


def test_the_positions_get_a_few_seconds_however_long_the_other_calls_may_take(monkeypatch):
    # Given the transactional calls' 30 s timeout
    producer = Producer()
    txn = opened(producer, timeout_s=30.0)
    # When the positions are sent, librdkafka is given the short bound for that call alone
    assert txn.commit(producer, [TopicPartition("dest", 0, 1)]) == COMMITTED
    assert producer.offsets_timeout == transactions.OFFSETS_TIMEOUT_S < 30.0
    # And a call that ignores it is given up after that bound (plus the overrun), not after 30 s
    monkeypatch.setattr(transactions, "OFFSETS_TIMEOUT_S", 0.05)
    answer, log = threading.Event(), Log()
    stuck = Producer(offsets_answer=answer)
    txn = opened(stuck, log=log, timeout_s=30.0)
    try:
        assert txn.commit(stuck, [TopicPartition("dest", 0, 1)]) == FATAL
        assert "transaction_call_hung" in log.events and stuck.offsets_timeout == 0.05
    finally:
        answer.set()


def test_an_abort_gets_a_few_seconds_and_one_that_times_out_costs_the_producer():
    # Given the transactional calls' 30 s timeout and an abort that times out
    producer = Producer(fail_abort=TxnError(KafkaError._TIMED_OUT, retriable=True))
    txn = opened(producer, timeout_s=30.0)
    # When the open transaction is aborted
    outcome = txn.abort(producer)
    # Then librdkafka was given the short bound, and the outcome asks for a new producer
    assert producer.abort_timeout == transactions.ABORT_TIMEOUT_S < 30.0
    assert outcome == FATAL and not txn.open


def test_a_slow_commit_or_abort_is_logged_with_how_long_it_took_a_quick_one_is_not():
    # Given a commit that takes 3 s and an abort that fails after 2.5 s (the clock moves inside the calls)
    clock = [0.0]

    class Slow(Producer):
        took = {"commit": 3.0, "abort": 2.5}

        def commit_transaction(self, timeout: float) -> None:
            clock[0] += self.took["commit"]
            super().commit_transaction(timeout)

        def abort_transaction(self, timeout: float) -> None:
            clock[0] += self.took["abort"]
            super().abort_transaction(timeout)

    log = Log()
    producer = Slow(fail_abort=TxnError(KafkaError._TIMED_OUT, retriable=True))
    txn = opened(producer, clock, log)
    # When one transaction commits and the next is aborted
    assert txn.commit(producer, [TopicPartition("t", 0, 5)]) == COMMITTED
    txn.begin(producer)
    assert txn.abort(producer) == FATAL
    # Then each slow call was logged, raised or not
    assert log.events.count("transaction_call_slow") == 2
    # And a quick commit is not
    Slow.took = {"commit": 0.5, "abort": 0.0}
    log.events.clear()
    quick = Slow()
    txn = opened(quick, clock, log)
    assert txn.commit(quick, []) == COMMITTED
    assert "transaction_call_slow" not in log.events


def test_a_retired_producer_is_let_go_beside_the_loop_never_closed():
    closes: list[str] = []

    class Closeable(Producer):
        def close(self) -> None:
            closes.append("close")  # would abort its transaction and flush, without a bound

    dropped = threading.Event()
    old = Closeable()
    weakref.finalize(old, dropped.set)
    last = [old]
    del old
    transactions.retire(last)
    assert dropped.wait(5) and closes == []  # the last reference went on the retiring thread


def test_a_fenced_producer_needs_init_transactions_again():
    producer = Producer(fail_commit=TxnError(KafkaError._FENCED, fatal=True))
    txn = opened(producer)
    txn.commit(producer, [])
    fresh = Producer()
    assert txn.ready(fresh) and fresh.calls == ["init"]


def test_an_open_transaction_is_abortable_only_once_librdkafka_holds_it_so():
    producer = Producer()
    txn = opened(producer)
    assert not txn.abortable(producer)  # open and healthy: begin_transaction's state error, nothing else
    producer.abortable_error = TxnError(KafkaError.MSG_SIZE_TOO_LARGE, abortable=True)
    assert txn.abortable(producer)
    assert txn.abort(producer) == ABORTED and not txn.abortable(producer)
    assert producer.calls == ["init", "begin", "abort"]  # the questions opened nothing


def test_an_abort_that_fails_is_fatal():
    producer = Producer(fail_abort=TxnError(KafkaError._TRANSPORT, retriable=True))
    txn = opened(producer)
    assert txn.abort(producer) == FATAL


@pytest.mark.parametrize("error", [TxnError(KafkaError._TIMED_OUT, retriable=True),
                                   TxnError(KafkaError._FENCED, fatal=True)])
def test_a_commit_that_failed_leaves_its_outcome_in_doubt_for_the_successor_to_settle(error):
    # Given a commit that timed out (librdkafka goes on with the EndTxn in the background) or was fenced
    producer = Producer(fail_commit=error)
    txn = opened(producer)
    # When it costs the producer
    assert txn.commit(producer, []) == FATAL
    # Then the successor must read the positions back: nothing says whether the commit landed
    assert txn.settle_due and not txn.in_doubt
    txn.settled()
    assert not txn.settle_due


def test_an_abort_that_meets_a_commit_still_under_way_leaves_it_in_doubt():
    # Given a commit whose call failed while its EndTxn may be under way (the state a timeout left
    # before commits that time out cost the producer; an abortable error whose abort then fails)
    producer = Producer(fail_commit=TxnError(KafkaError._STATE, abortable=True),
                        fail_abort=TxnError(KafkaError._CONFLICT))
    txn = opened(producer)
    assert txn.commit(producer, []) == FATAL
    assert txn.settle_due


@pytest.mark.parametrize("ending", ["commit", "abort"])
def test_a_commit_or_an_abort_that_succeeds_leaves_nothing_in_doubt(ending):
    producer = Producer()
    txn = opened(producer)
    txn.in_doubt = True  # a commit call under way
    assert (txn.commit(producer, []) == COMMITTED) if ending == "commit" else (txn.abort(producer) == ABORTED)
    txn.reset()
    assert not txn.in_doubt and not txn.settle_due


def test_a_replacement_with_no_commit_in_doubt_reads_nothing_back():
    # A producer lost while sending the positions (its commit never started) or fenced mid-transaction
    producer = Producer(fail_offsets=TxnError(KafkaError._FENCED, fatal=True))
    txn = opened(producer)
    assert txn.commit(producer, [TopicPartition("t", 0, 5)]) == FATAL
    assert not txn.settle_due


def test_the_recorded_mode_decodes_or_says_nothing():
    assert transactions.decode_mode(b'{"exactly_once": true}') is True
    assert transactions.decode_mode(b'{"exactly_once": false}') is False
    assert transactions.decode_mode(b"garbage") is None
    assert transactions.decode_mode(None) is None


def _config(**worker: Any) -> Any:
    from ureplicator.common import config as config_module
    return config_module.from_dict({
        "pipeline": "unit",
        "zookeeper": {"connect": "127.0.0.1:1"},
        "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1"},
        "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2"},
        "worker": worker,
    })


def test_exactly_once_is_off_by_default_and_its_transactional_id_is_the_group_plus_the_worker_id():
    from ureplicator.worker import clients
    cfg = _config()
    assert cfg.worker.exactly_once is False and cfg.worker.transaction_interval_ms == 1000
    assert clients.transactional_id(cfg, "w1") == "ureplicator.unit.w1"
    assert clients.transactional_id(_config(transactional_id_prefix="pay."), "w1") == "pay.w1"


@pytest.mark.parametrize(("worker", "key"), [
    ({"transaction_interval_ms": 5}, "worker.transaction_interval_ms"),
    ({"transaction_interval_ms": 600_001}, "worker.transaction_interval_ms"),
])
def test_settings_exactly_once_cannot_serve_are_refused(worker, key):
    from ureplicator.common.errors import ConfigError
    with pytest.raises(ConfigError, match=key):
        _config(**worker)


def test_exactly_once_accepts_the_c_loop():
    # Both loops serve exactly-once mode: 'on' is no longer refused with it.
    cfg = _config(exactly_once=True, native_loop="on")
    assert cfg.worker.exactly_once and cfg.worker.native_loop == "on"


def test_init_transactions_gets_a_few_seconds_and_is_asked_again_after_a_timeout():
    class Slow(Producer):
        timeouts: list[float] = []

        def init_transactions(self, timeout: float) -> None:
            self.timeouts.append(timeout)
            if len(self.timeouts) == 1:
                raise KafkaException(TxnError(KafkaError._TIMED_OUT, retriable=True))
            super().init_transactions(timeout)

    producer, log = Slow(), Log()
    txn = Transactions(1.0, 1000, lambda: "group-metadata", log, timeout_s=30.0)
    assert not txn.ready(producer) and "transactions_init_failed" in log.events
    assert txn.ready(producer) and txn.ready_on(producer)
    assert producer.timeouts == [transactions.INIT_TIMEOUT_S] * 2
