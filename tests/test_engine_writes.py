"""A step rewrites a worker's row only when something other than the time it was listed
changed, or that time is a minute old (issue 32: each worker's row was written every step)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vastui.domain.worker import InstanceRecord
from vastui.engine.engine import LAST_SEEN_EVERY_S, _observed_only, _only_seen

NOW = 1_790_000_000.0
REC = InstanceRecord(
    vast_id=7, label="vastui-main-7", state="proving", vast_status="running", dph_total=0.4,
    status_msg="ok", ssh_host="10.0.0.1", ssh_port=22, last_seen_at=NOW - 30,
)  # fmt: skip
SEEN = {"vast_status": "running", "dph_total": 0.4, "status_msg": "ok", "ssh_host": "10.0.0.1",
        "ssh_port": 22, "last_seen_at": NOW}  # fmt: skip


@pytest.mark.parametrize(
    ("rec", "fields", "skip"),
    [
        (REC, SEEN, True),  # only the time: nothing written
        (replace(REC, last_seen_at=NOW - LAST_SEEN_EVERY_S), SEEN, False),  # a minute old
        (replace(REC, last_seen_at=None), SEEN, False),  # never written
        (REC, {**SEEN, "status_msg": "loading"}, False),  # Vast's word changed
        (REC, {**SEEN, "dph_total": 0.41}, False),  # the price changed
        (REC, {**SEEN, "unhealthy_since": NOW}, False),  # it turned unhealthy
        (replace(REC, unhealthy_since=NOW - 90), {**SEEN, "unhealthy_since": NOW - 90}, True),
    ],
)  # fmt: skip
def test_only_the_listing_time_is_not_a_write(rec: InstanceRecord, fields, skip: bool) -> None:
    assert _only_seen(rec, fields, NOW) is skip


@pytest.mark.parametrize(
    ("rec", "fields", "waits"),
    [
        (REC, SEEN, True),  # nothing but the listing's own fields
        (REC, {**SEEN, "vast_status": "offline", "status_msg": "host down"}, True),
        (REC, {**SEEN, "ssh_host": "10.0.0.2", "ssh_port": 2222, "dph_total": 0.5}, True),
        (REC, {**SEEN, "unhealthy_since": NOW}, False),  # a clock starts: written now
        (replace(REC, unhealthy_since=NOW - 90), {**SEEN, "unhealthy_since": NOW - 90}, True),
        (REC, {**SEEN, "running_at": NOW}, False),  # when it began to run: written now
        (REC, {**SEEN, "outbid_since": NOW}, False),  # a bid's state: written now
    ],
)  # fmt: skip
def test_only_the_listings_own_fields_wait_for_the_reconciles_end(
    rec: InstanceRecord, fields, waits: bool
) -> None:
    assert _observed_only(rec, fields) is waits
