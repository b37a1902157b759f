"""Run stores: one search or evaluation batch with its config, event log and artifacts.

``SqliteRunStore`` keeps a run durably in ``<runs_dir>/<run_id>/`` and resumes it by id;
``InMemoryRunStore`` keeps the same contract in memory for dry runs and tests. Every store
passes ``loopwise.core.store.conformance.RunStoreConformance`` (imported on its own: it needs
pytest).
"""

from loopwise.core.store._base import RunStore
from loopwise.core.store._memory import InMemoryRunStore
from loopwise.core.store._records import ArtifactError, ArtifactInfo, Event, RunMeta, finite
from loopwise.core.store._sqlite import SCHEMA_VERSION, SqliteRunStore, list_runs

__all__ = [
    "SCHEMA_VERSION",
    "ArtifactError",
    "ArtifactInfo",
    "Event",
    "InMemoryRunStore",
    "RunMeta",
    "RunStore",
    "SqliteRunStore",
    "finite",
    "list_runs",
]
