"""planexec: plan-and-execute tool calling with a robust argument resolver.

No argument is ever dropped, guessed or passed through silently.
"""

from typing import TYPE_CHECKING, Any

from loguru import logger as _logger

from planexec.errors import (
    ApprovalError,
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
    RetryableToolError,
    RunError,
    RunNotFoundError,
    StoreError,
    ToolArgumentsError,
    ToolCallFailure,
    ToolLoadError,
)
from planexec.plan import (
    Diagnostic,
    Plan,
    Ref,
    Severity,
    Step,
    Template,
)

_logger.disable("planexec")  # quiet as a library: see enable_logging (planexec._log)

if TYPE_CHECKING:  # the heavy modules load on first use (see __getattr__)
    from planexec._log import (
        disable_logging,
        enable_logging,
    )
    from planexec.agent import (
        PlanExecuteAgent,
    )
    from planexec.approval import (
        ApprovalDecision,
        ApprovalRequest,
    )
    from planexec.config import (
        AgentConfig,
        ExecutorSettings,
        load_config,
    )
    from planexec.evaluation import (
        EvalStatus,
        Evaluator,
        FunctionEvaluator,
        LLMJudge,
        Verdict,
    )
    from planexec.events import (
        Event,
        EventBus,
    )
    from planexec.executor import (
        Executor,
    )
    from planexec.models import (
        load_model,
    )
    from planexec.parsing import (
        check_plan,
        detect_dialect,
        parse_plan,
    )
    from planexec.parsing.streaming import (
        StreamingPlanParser,
    )
    from planexec.recovery import (
        Action,
        RecoveryPolicy,
    )
    from planexec.resolver import (
        ArgResolver,
    )
    from planexec.results import (
        PlanAttempt,
        ResolutionMethod,
        Run,
        RunStatus,
        StepResult,
        StepStatus,
        Usage,
    )
    from planexec.runtime import (
        Runtime,
    )
    from planexec.tools import (
        ToolCatalog,
        ToolHints,
        ToolSpec,
        load_tools,
        tool_hints,
    )

_LAZY: dict[str, str] = {
    "Action": "planexec.recovery",
    "AgentConfig": "planexec.config",
    "ApprovalDecision": "planexec.approval",
    "ApprovalRequest": "planexec.approval",
    "ArgResolver": "planexec.resolver",
    "EvalStatus": "planexec.evaluation",
    "Evaluator": "planexec.evaluation",
    "Event": "planexec.events",
    "EventBus": "planexec.events",
    "Executor": "planexec.executor",
    "ExecutorSettings": "planexec.config",
    "FunctionEvaluator": "planexec.evaluation",
    "LLMJudge": "planexec.evaluation",
    "PlanAttempt": "planexec.results",
    "PlanExecuteAgent": "planexec.agent",
    "RecoveryPolicy": "planexec.recovery",
    "ResolutionMethod": "planexec.results",
    "Run": "planexec.results",
    "RunStatus": "planexec.results",
    "Runtime": "planexec.runtime",
    "StepResult": "planexec.results",
    "StepStatus": "planexec.results",
    "StreamingPlanParser": "planexec.parsing.streaming",
    "ToolCatalog": "planexec.tools",
    "ToolHints": "planexec.tools",
    "ToolSpec": "planexec.tools",
    "Usage": "planexec.results",
    "Verdict": "planexec.evaluation",
    "check_plan": "planexec.parsing",
    "detect_dialect": "planexec.parsing",
    "disable_logging": "planexec._log",
    "enable_logging": "planexec._log",
    "load_config": "planexec.config",
    "load_model": "planexec.models",
    "load_tools": "planexec.tools",
    "parse_plan": "planexec.parsing",
    "tool_hints": "planexec.tools",
}
"""Public names imported on first use, so `import planexec` stays light."""

__version__ = "0.1.0"

__all__ = [
    "Action",
    "AgentConfig",
    "ApprovalDecision",
    "ApprovalError",
    "ApprovalRequest",
    "ArgResolver",
    "CassetteError",
    "CassetteMissError",
    "check_plan",
    "CircuitOpenError",
    "ConfigError",
    "detect_dialect",
    "Diagnostic",
    "disable_logging",
    "enable_logging",
    "ErrorKind",
    "EvalStatus",
    "Evaluator",
    "Event",
    "EventBus",
    "Executor",
    "ExecutorSettings",
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
    "RetryableToolError",
    "Run",
    "RunError",
    "RunNotFoundError",
    "RunStatus",
    "Runtime",
    "Severity",
    "Step",
    "StepResult",
    "StepStatus",
    "StoreError",
    "StreamingPlanParser",
    "Template",
    "ToolArgumentsError",
    "ToolCallFailure",
    "ToolCatalog",
    "ToolHints",
    "ToolLoadError",
    "ToolSpec",
    "tool_hints",
    "Usage",
    "Verdict",
    "__version__",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'planexec' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
