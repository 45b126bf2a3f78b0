"""planexec: plan-and-execute tool calling with a robust argument resolver.

No argument is ever dropped, guessed or passed through silently.

The public names are listed once, in `_LAZY` (each name -> the module that defines
it): `__all__` is made from it, and each name is imported on first use (PEP 562), so
`import planexec` stays light. The ``if TYPE_CHECKING:`` block repeats the table as
imports, for type checkers, which cannot read a table; ``tests/test_public_api.py``
fails when the two differ.
"""

from typing import TYPE_CHECKING, Any

from loguru import logger as _logger

_logger.disable("planexec")  # quiet as a library: see enable_logging (planexec._log)

if TYPE_CHECKING:  # the same names as _LAZY, for type checkers (``X as X``: re-exported)
    from planexec._log import disable_logging as disable_logging
    from planexec._log import enable_logging as enable_logging
    from planexec.agent import PlanExecuteAgent as PlanExecuteAgent
    from planexec.approval import ApprovalDecision as ApprovalDecision
    from planexec.approval import ApprovalRequest as ApprovalRequest
    from planexec.config import AgentConfig as AgentConfig
    from planexec.config import ExecutorSettings as ExecutorSettings
    from planexec.config import load_config as load_config
    from planexec.errors import ApprovalError as ApprovalError
    from planexec.errors import CassetteError as CassetteError
    from planexec.errors import CassetteMissError as CassetteMissError
    from planexec.errors import CircuitOpenError as CircuitOpenError
    from planexec.errors import ConfigError as ConfigError
    from planexec.errors import ErrorKind as ErrorKind
    from planexec.errors import MissingExtraError as MissingExtraError
    from planexec.errors import ModelError as ModelError
    from planexec.errors import ModelTimeoutError as ModelTimeoutError
    from planexec.errors import PlanexecError as PlanexecError
    from planexec.errors import PlanParseError as PlanParseError
    from planexec.errors import RetryableToolError as RetryableToolError
    from planexec.errors import RunError as RunError
    from planexec.errors import RunNotFoundError as RunNotFoundError
    from planexec.errors import StoreError as StoreError
    from planexec.errors import ToolArgumentsError as ToolArgumentsError
    from planexec.errors import ToolCallFailure as ToolCallFailure
    from planexec.errors import ToolLoadError as ToolLoadError
    from planexec.evaluation import EvalStatus as EvalStatus
    from planexec.evaluation import Evaluator as Evaluator
    from planexec.evaluation import FunctionEvaluator as FunctionEvaluator
    from planexec.evaluation import LLMJudge as LLMJudge
    from planexec.evaluation import Verdict as Verdict
    from planexec.events import Event as Event
    from planexec.events import EventBus as EventBus
    from planexec.executor import Executor as Executor
    from planexec.models import load_model as load_model
    from planexec.parsing import check_plan as check_plan
    from planexec.parsing import detect_dialect as detect_dialect
    from planexec.parsing import parse_plan as parse_plan
    from planexec.parsing.streaming import StreamingPlanParser as StreamingPlanParser
    from planexec.plan import Diagnostic as Diagnostic
    from planexec.plan import Plan as Plan
    from planexec.plan import Ref as Ref
    from planexec.plan import Severity as Severity
    from planexec.plan import Step as Step
    from planexec.plan import Template as Template
    from planexec.recovery import Action as Action
    from planexec.recovery import RecoveryPolicy as RecoveryPolicy
    from planexec.resolver import ArgResolver as ArgResolver
    from planexec.results import PlanAttempt as PlanAttempt
    from planexec.results import ResolutionMethod as ResolutionMethod
    from planexec.results import Run as Run
    from planexec.results import RunStatus as RunStatus
    from planexec.results import StepError as StepError
    from planexec.results import StepResult as StepResult
    from planexec.results import StepStatus as StepStatus
    from planexec.results import Usage as Usage
    from planexec.runtime import Runtime as Runtime
    from planexec.tools import ToolCatalog as ToolCatalog
    from planexec.tools import ToolHints as ToolHints
    from planexec.tools import ToolSpec as ToolSpec
    from planexec.tools import load_tools as load_tools
    from planexec.tools import tool_hints as tool_hints

_LAZY: dict[str, str] = {
    "disable_logging": "planexec._log",
    "enable_logging": "planexec._log",
    "PlanExecuteAgent": "planexec.agent",
    "ApprovalDecision": "planexec.approval",
    "ApprovalRequest": "planexec.approval",
    "AgentConfig": "planexec.config",
    "ExecutorSettings": "planexec.config",
    "load_config": "planexec.config",
    "ApprovalError": "planexec.errors",
    "CassetteError": "planexec.errors",
    "CassetteMissError": "planexec.errors",
    "CircuitOpenError": "planexec.errors",
    "ConfigError": "planexec.errors",
    "ErrorKind": "planexec.errors",
    "MissingExtraError": "planexec.errors",
    "ModelError": "planexec.errors",
    "ModelTimeoutError": "planexec.errors",
    "PlanexecError": "planexec.errors",
    "PlanParseError": "planexec.errors",
    "RetryableToolError": "planexec.errors",
    "RunError": "planexec.errors",
    "RunNotFoundError": "planexec.errors",
    "StoreError": "planexec.errors",
    "ToolArgumentsError": "planexec.errors",
    "ToolCallFailure": "planexec.errors",
    "ToolLoadError": "planexec.errors",
    "EvalStatus": "planexec.evaluation",
    "Evaluator": "planexec.evaluation",
    "FunctionEvaluator": "planexec.evaluation",
    "LLMJudge": "planexec.evaluation",
    "Verdict": "planexec.evaluation",
    "Event": "planexec.events",
    "EventBus": "planexec.events",
    "Executor": "planexec.executor",
    "load_model": "planexec.models",
    "check_plan": "planexec.parsing",
    "detect_dialect": "planexec.parsing",
    "parse_plan": "planexec.parsing",
    "StreamingPlanParser": "planexec.parsing.streaming",
    "Diagnostic": "planexec.plan",
    "Plan": "planexec.plan",
    "Ref": "planexec.plan",
    "Severity": "planexec.plan",
    "Step": "planexec.plan",
    "Template": "planexec.plan",
    "Action": "planexec.recovery",
    "RecoveryPolicy": "planexec.recovery",
    "ArgResolver": "planexec.resolver",
    "PlanAttempt": "planexec.results",
    "ResolutionMethod": "planexec.results",
    "Run": "planexec.results",
    "RunStatus": "planexec.results",
    "StepError": "planexec.results",
    "StepResult": "planexec.results",
    "StepStatus": "planexec.results",
    "Usage": "planexec.results",
    "Runtime": "planexec.runtime",
    "load_tools": "planexec.tools",
    "tool_hints": "planexec.tools",
    "ToolCatalog": "planexec.tools",
    "ToolHints": "planexec.tools",
    "ToolSpec": "planexec.tools",
}
"""Every public name -> the module that defines it (imported on first use)."""

__version__ = "0.1.0"

__all__ = [*_LAZY, "__version__"]


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
