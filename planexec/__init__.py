"""planexec: plan-and-execute tool calling with a robust argument resolver.

No argument is ever dropped, guessed or passed through silently.
"""

from planexec.errors import (
    CassetteError,
    CassetteMissError,
    CircuitOpenError,
    ConfigError,
    ErrorKind,
    MissingExtraError,
    ModelError,
    ModelTimeoutError,
    PlanexecError,
    PlanParseError,
    RunError,
    RunNotFoundError,
    StoreError,
    ToolLoadError,
)
from planexec.events import Event, EventBus
from planexec.plan import Diagnostic, Plan, Ref, Severity, Step, Template
from planexec.results import (
    PlanAttempt,
    ResolutionMethod,
    Run,
    RunStatus,
    StepResult,
    StepStatus,
    Usage,
)

__version__ = "0.1.0"

__all__ = [
    "CassetteError",
    "CassetteMissError",
    "CircuitOpenError",
    "ConfigError",
    "Diagnostic",
    "ErrorKind",
    "Event",
    "EventBus",
    "MissingExtraError",
    "ModelError",
    "ModelTimeoutError",
    "Plan",
    "PlanAttempt",
    "PlanParseError",
    "PlanexecError",
    "Ref",
    "ResolutionMethod",
    "Run",
    "RunError",
    "RunNotFoundError",
    "RunStatus",
    "Severity",
    "Step",
    "StepResult",
    "StepStatus",
    "StoreError",
    "Template",
    "ToolLoadError",
    "Usage",
    "__version__",
]
