"""Errors that reach a person: each carries one clear message and maps to an exit status."""

from __future__ import annotations


class UReplicatorError(Exception):
    """Base for errors with a message meant for the operator."""

    exit_status = 1


class ConfigError(UReplicatorError):
    """An invalid or missing configuration key; the process stops with exit status 2."""

    exit_status = 2

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"config error: {key}: {message}")
        self.key = key
        self.reason = message


class ClusterUnavailable(UReplicatorError):
    """A Kafka cluster or ZooKeeper ensemble did not answer in time."""
