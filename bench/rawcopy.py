"""Copy one topic between clusters with the simplest fast confluent-kafka loop: the raw client limit.

    python -m bench.rawcopy --source HOST:PORT --destination HOST:PORT \
        --topic T --to T2 --partitions 8 --records N

After the last record it flushes, prints ``done`` and waits for SIGTERM (its CPU stays readable).
"""

from __future__ import annotations

import argparse
import signal
import sys

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.common import CONSUMER_SETTINGS, PRODUCER_SETTINGS


def copy(source: str, destination: str, topic: str, to: str, partitions: int, records: int, batch: int) -> int:
    """Copy ``records`` records of ``topic`` to ``to`` (same partition, key, value, timestamp); the unflushed count."""
    consumer = Consumer({**CONSUMER_SETTINGS, "bootstrap.servers": source, "group.id": "bench-rawcopy"})
    producer = Producer({**PRODUCER_SETTINGS, "bootstrap.servers": destination, "client.id": "bench-rawcopy"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    produce, poll = producer.produce, producer.poll
    copied = 0
    while copied < records:
        for msg in consumer.consume(batch, 0.05):
            if msg.error() is not None:
                continue
            while True:
                try:
                    produce(to, msg.value(), msg.key(), msg.partition(), timestamp=msg.timestamp()[1])
                    break
                except BufferError:
                    poll(0.05)
            copied += 1
        poll(0)
    left = producer.flush(120)
    consumer.close()
    return left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rawcopy", description=__doc__.splitlines()[0])
    for name in ("source", "destination", "topic", "to"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--records", type=int, required=True, help="stop after this many records")
    parser.add_argument("--batch", type=int, default=1000, help="consume() batch (the worker's default)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    left = copy(args.source, args.destination, args.topic, args.to, args.partitions, args.records, args.batch)
    print("done" if left == 0 else f"unflushed {left}", flush=True)
    signal.pause()  # keep /proc/<pid> readable until the benchmark has sampled it
    return 0


if __name__ == "__main__":
    sys.exit(main())
