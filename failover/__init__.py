"""Disaster-recovery failover: translate consumer-group offsets to the destination and sync them."""
