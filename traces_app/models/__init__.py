"""traces_app's records, one module per kind (Django's models in a package): every model here."""

from traces_app.models.api_keys import SCOPES, ApiKey, hash_api_key
from traces_app.models.job_leases import JobLease
from traces_app.models.otlp_producers import OtlpProducer
from traces_app.models.rollup_tables import (
    PurgeHorizon,
    RollupMark,
    SpanRollup,
    ToolDayRollup,
    ToolRollup,
)
from traces_app.models.score_records import (
    SCORE_NAME_PATTERN,
    Score,
    ScoreDefinition,
    ScoreSource,
    ScoreType,
)
from traces_app.models.spiral_records import FailureSpiral, SpiralKind, SpiralResolution
from traces_app.models.trace_records import (
    CALLER_FAULTS,
    ChosenBy,
    Dialect,
    Invocation,
    ResultReduction,
    SpanKind,
    SpanStatus,
    Trace,
    TraceStatus,
    caller_fault_q,
)

__all__ = [
    "CALLER_FAULTS", "SCOPES", "SCORE_NAME_PATTERN", "ApiKey", "ChosenBy", "Dialect",
    "FailureSpiral", "Invocation", "JobLease", "OtlpProducer", "PurgeHorizon", "ResultReduction",
    "RollupMark", "Score", "ScoreDefinition", "ScoreSource", "ScoreType", "SpanKind", "SpanRollup",
    "SpanStatus", "SpiralKind", "SpiralResolution", "ToolDayRollup", "ToolRollup", "Trace",
    "TraceStatus", "caller_fault_q", "hash_api_key",
]  # fmt: skip
