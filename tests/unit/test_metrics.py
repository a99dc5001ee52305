"""The metrics registry and its text exposition, without a database."""

from __future__ import annotations

import pytest

from pgq import InvalidJob
from pgq.metrics import DURATION_BUCKETS, JOB_EVENTS, Backlog, Metrics, format_value
from pgq.worker import WorkerConfig
from tests.prometheus import parse


def test_render_counts_events_by_queue_and_kind_with_help_and_type() -> None:
    metrics = Metrics("w-1", queues=["mail"], concurrency=4)
    for _ in range(3):
        metrics.job_event("claimed", "mail", "send")
    metrics.job_event("succeeded", "mail", "send")
    metrics.job_event("lost", "mail", "send")
    metrics.job_event("rescued", "other", "resize")

    families = parse(metrics.render())

    assert families["pgq_jobs_claimed_total"].type == "counter"
    assert families["pgq_jobs_claimed_total"].value(queue="mail", kind="send") == 3
    assert families["pgq_jobs_succeeded_total"].value(queue="mail", kind="send") == 1
    assert families["pgq_lease_lost_total"].value(queue="mail", kind="send") == 1
    assert families["pgq_jobs_rescued_total"].value(queue="other", kind="resize") == 1
    assert families["pgq_jobs_failed_total"].samples == {}  # declared, no sample yet
    assert {name for name, _ in JOB_EVENTS.values()} <= families.keys()
    assert all(f.help for f in families.values())
    [(_, info_labels)] = families["pgq_worker_info"].samples
    assert dict(info_labels)["worker"] == "w-1" and dict(info_labels)["queues"] == "mail"


def test_histogram_buckets_are_cumulative_and_count_every_observation() -> None:
    metrics = Metrics("w", queues=None, concurrency=1)
    for seconds in (0.001, 0.005, 0.007, 0.3, 2.0, 10_000.0):
        metrics.job_duration("q", "k", seconds)

    hist = parse(metrics.render())["pgq_job_duration_seconds"]

    assert hist.type == "histogram"
    assert hist.value("_bucket", queue="q", kind="k", le="0.005") == 2  # le is inclusive
    assert hist.value("_bucket", queue="q", kind="k", le="0.01") == 3
    assert hist.value("_bucket", queue="q", kind="k", le="0.5") == 4
    assert hist.value("_bucket", queue="q", kind="k", le="3600") == 5
    assert hist.value("_bucket", queue="q", kind="k", le="+Inf") == 6
    assert hist.value("_count", queue="q", kind="k") == 6
    assert hist.value("_sum", queue="q", kind="k") == pytest.approx(10_002.313)
    assert len([s for s in hist.samples if s[0].endswith("_bucket")]) == len(DURATION_BUCKETS) + 1


def test_label_values_with_quotes_backslashes_and_newlines_round_trip() -> None:
    metrics = Metrics('w"\\', queues=None, concurrency=1)
    nasty = 'a"b\\c\nd; DROP TABLE x; 100%'
    metrics.job_event("failed", nasty, "k\n")

    families = parse(metrics.render())

    assert families["pgq_jobs_failed_total"].value(queue=nasty, kind="k\n") == 1


def test_backlog_gauges_fill_in_served_queues_without_jobs_and_report_read_failures() -> None:
    metrics = Metrics("w", queues=["a", "b"], concurrency=1)
    backlog = Backlog(True, ({"queue": "a", "ready": 5, "scheduled": 2, "running": 1, "expired_leases": 1,
                              "oldest_ready_age_s": 12.5},))

    families = parse(metrics.render(backlog))

    jobs = families["pgq_queue_jobs"]
    assert jobs.value(queue="a", state="ready") == 5 and jobs.value(queue="a", state="scheduled") == 2
    assert jobs.value(queue="a", state="running") == 1 and jobs.value(queue="b", state="ready") == 0
    assert families["pgq_queue_oldest_ready_age_seconds"].value(queue="a") == 12.5
    assert families["pgq_queue_oldest_ready_age_seconds"].value(queue="b") == 0
    assert families["pgq_queue_expired_leases"].value(queue="a") == 1
    assert families["pgq_queue_stats_up"].value() == 1

    down = parse(metrics.render(Backlog(False)))
    assert down["pgq_queue_stats_up"].value() == 0
    assert down["pgq_queue_jobs"].samples == {}


def test_watch_reads_worker_state_at_render_time() -> None:
    metrics = Metrics("w", queues=None, concurrency=8)
    running = {1: "a", 2: "b"}
    metrics.watch(running=lambda: len(running), prefetched=lambda: 3, listen_connected=lambda: True,
                  listen_reconnects=lambda: 2)

    families = parse(metrics.render())

    assert families["pgq_worker_jobs_running"].value() == 2
    assert families["pgq_worker_jobs_prefetched"].value() == 3
    assert families["pgq_worker_concurrency"].value() == 8
    assert families["pgq_listen_connected"].value() == 1
    assert families["pgq_listen_reconnects_total"].value() == 2


@pytest.mark.parametrize(("value", "text"), [(3, "3"), (2.5, "2.5"), (float("inf"), "+Inf"), (float("nan"), "NaN"),
                                             (1e-7, "1e-07")])
def test_format_value(value: float, text: str) -> None:
    assert format_value(value) == text


@pytest.mark.parametrize(("settings", "message"), [
    ({"metrics_port": -1}, "metrics_port must be an int >= 0"),
    ({"metrics_port": 65536}, "metrics_port must be an int in 0..65535"),
    ({"metrics_port": True}, "metrics_port must be an int"),
    ({"metrics_port": "9100"}, "metrics_port must be an int"),
    ({"metrics_host": ""}, "metrics_host must be a non-empty str"),
])
def test_worker_config_rejects_bad_metrics_settings(settings: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        WorkerConfig.build(**settings)


def test_worker_config_accepts_metrics_port_zero_and_defaults_to_localhost() -> None:
    config = WorkerConfig.build(metrics_port=0)
    assert (config.metrics_port, config.metrics_host) == (0, "127.0.0.1")
    assert WorkerConfig().metrics_port is None
