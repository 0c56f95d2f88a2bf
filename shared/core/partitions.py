"""Which partition a run belongs to: the server's ``{{partition(n, k)}}`` subject transform,
computed the same way here (FNV-1a, 32 bits, of the run id, modulo n), so an orchestrator
taking a partition over finds the partition's live runs among the stored ones.
tests/test_partitions.py checks it against the server's own transform."""

from __future__ import annotations

FNV_OFFSET = 0x811C9DC5
FNV_PRIME = 0x01000193


def partition_of(run_id: str, partitions: int) -> int:
    h = FNV_OFFSET
    for byte in run_id.encode():
        h = ((h ^ byte) * FNV_PRIME) & 0xFFFFFFFF
    return h % partitions


def subject_partition(subject: str) -> int:
    """The partition a stored command or event subject ends with."""
    return int(subject.rsplit(".", 1)[1])
