"""``python -m examples.standalone.produce``: add the application's jobs and print what
each add did, one JSON object per line."""

from __future__ import annotations

import json

from examples.standalone.app import build_report, make_thumbnail, require_redis
from herald.queue import enqueue


def main() -> None:
    """Add a thumbnail twice under one dedup id, one that fails once, and a report."""
    require_redis()
    adds = {
        "first": enqueue(make_thumbnail, {"image_id": 1}, dedup_id="image-1"),
        # the same image while the first job is live: the dedup id holds
        "again": enqueue(make_thumbnail, {"image_id": 1}, dedup_id="image-1"),
        "flaky": enqueue(make_thumbnail, {"image_id": 2, "fail_first": 1}, job_id="flaky-2"),
        "report": enqueue(build_report, {"kind": "on-demand"}, job_id="report-1"),
    }
    for name, result in adds.items():
        print(json.dumps({"add": name, "status": result.status, "job_id": result.job_id}))


if __name__ == "__main__":
    main()
