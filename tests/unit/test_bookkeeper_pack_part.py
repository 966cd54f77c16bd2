"""What a survey sends its Spark tasks, packed as the pickler writes it (``pack_part``):
whatever pickles goes, and comes back the same."""

from __future__ import annotations

import pickle
from array import array
from types import SimpleNamespace

import numpy as np

from ledger_gc.bookkeeper import survey
from ledger_gc.bookkeeper.survey import pack_part, unpack_part


def test_a_part_that_pickles_a_large_buffer_in_band_is_packed() -> None:
    """Protocol 5 pickles a numpy array through a ``PickleBuffer``, and a large one
    (64 KiB or more) the pickler hands to the file's ``write`` as it is, which has no
    ``len``: packing the pickle as it was written then failed (``TypeError``), where
    packing the whole pickle, as before, did not. Its size counts its bytes."""
    part = (np.arange(100_000, dtype=np.int64), array("q", range(20_000)), b"x" * 70_000)

    packed, unpacked = pack_part(part)

    ids, more, raw = unpack_part(packed)
    assert np.array_equal(ids, part[0]) and more == part[1] and raw == part[2]
    assert unpacked == len(pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL))


def test_a_worker_unpacks_the_classifier_all_tasks_share_once_a_survey() -> None:
    """Spark hands one Python worker task after task, each with the same broadcast (a
    new ``Broadcast`` object of it each task, where it is large): the classifier they
    share is unpacked by the first alone (at 100,000 topics, 16 MB a task), and another
    survey's broadcast is unpacked anew, the earlier one let go."""
    packed = pack_part({"topics": ["a", "b"]})[0]

    unpacked = survey._shared_classifier(SimpleNamespace(value=packed))

    assert unpacked == {"topics": ["a", "b"]}
    assert survey._shared_classifier(SimpleNamespace(value=bytes(bytearray(packed)))) is unpacked
    later = pack_part({"topics": ["c"]})[0]
    assert survey._shared_classifier(SimpleNamespace(value=later)) == {"topics": ["c"]}
    assert [kept for kept, _ in survey._UNPACKED.values()] == [later]
