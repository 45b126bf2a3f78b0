"""planexec: plan-and-execute tool calling with a robust argument resolver.

No argument is ever dropped, guessed or passed through silently.
"""

from planexec.agent import PlanExecuteAgent
from planexec.config import AgentConfig, load_config
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
from planexec.evaluation import EvalStatus, Evaluator, FunctionEvaluator, LLMJudge, Verdict
from planexec.events import Event, EventBus
from planexec.executor import Executor, ExecutorConfig
from planexec.models import load_model
from planexec.parsing import check_plan, detect_dialect, parse_plan
from planexec.plan import Diagnostic, Plan, Ref, Severity, Step, Template
from planexec.recovery import Action, RecoveryPolicy
from planexec.resolver import ArgResolver
from planexec.results import (
    PlanAttempt,
    ResolutionMethod,
    Run,
    RunStatus,
    StepResult,
    StepStatus,
    Usage,
)
from planexec.tools import ToolCatalog, ToolHints, ToolSpec, load_tools

__version__ = "0.1.0"

__all__ = [
    "Action",
    "AgentConfig",
    "ArgResolver",
    "CassetteError",
    "CassetteMissError",
    "check_plan",
    "CircuitOpenError",
    "ConfigError",
    "detect_dialect",
    "Diagnostic",
    "ErrorKind",
    "EvalStatus",
    "Evaluator",
    "Event",
    "EventBus",
    "Executor",
    "ExecutorConfig",
    "FunctionEvaluator",
    "LLMJudge",
    "load_config",
    "load_model",
    "load_tools",
    "MissingExtraError",
    "ModelError",
    "ModelTimeoutError",
    "parse_plan",
    "Plan",
    "PlanAttempt",
    "PlanexecError",
    "PlanExecuteAgent",
    "PlanParseError",
    "RecoveryPolicy",
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
    "ToolCatalog",
    "ToolHints",
    "ToolLoadError",
    "ToolSpec",
    "Usage",
    "Verdict",
    "__version__",
]
