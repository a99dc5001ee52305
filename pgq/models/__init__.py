"""Data types of pgq's public API: Job, JobStatus, JobSpec, Claim.

In three modules along their seams: `types` (JobStatus and the small types), `job` (a job as read,
its claim, its dependencies) and `spec` (JobSpec and its validation). Import them from here.
"""

from .job import Claim, Dependencies, Dependency, Job, claims_from_tuples
from .spec import (
    MAX_UNIQUE_FOR_S,
    JobSpec,
    TracedJobSpec,
    delay_seconds,
    encode_json,
    group_key_from,
    positive_seconds,
)
from .types import (
    ACTIVE,
    FINISHED,
    JSON,
    MAX_PAYLOAD_BYTES,
    PRIORITY_MAX,
    PRIORITY_MIN,
    STATUS_BY_VALUE,
    JobStatus,
    jsonable,
)

__all__ = [
    "ACTIVE",
    "FINISHED",
    "JSON",
    "MAX_PAYLOAD_BYTES",
    "MAX_UNIQUE_FOR_S",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "STATUS_BY_VALUE",
    "Claim",
    "Dependencies",
    "Dependency",
    "Job",
    "JobSpec",
    "JobStatus",
    "TracedJobSpec",
    "claims_from_tuples",
    "delay_seconds",
    "encode_json",
    "group_key_from",
    "jsonable",
    "positive_seconds",
]
