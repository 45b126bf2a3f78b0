"""`RayToolRunner`: the executor's tool calls as Ray tasks.

The executor stays the same (DAG, resolution, invariants, retries, timeouts, circuit
breakers, events); only the `ToolRunner` changes. Each call becomes one Ray task:

- **the tool** travels pickled (cloudpickle, put once per tool in the object store), or,
  with ``tools="MODULE:ATTR"``, is loaded inside the worker by name — for tools that do
  not pickle (open connections, MCP sessions). A tool's in-process state (counters,
  caches) is a copy per task: state that must be shared belongs in a service;
- **resources** per tool: ``default`` ← ``tool.metadata["planexec"]["ray"]`` ←
  ``tool_options[name]`` (later wins);
- **outputs stay in the object store**: the runner keeps, for each output it returned,
  the Ray object reference it came from. When a later step's resolved arguments hold
  that very output (a whole-value reference ``<step_2>``, possibly nested in a dict or
  list), the task receives the object reference instead of the value, and the worker
  reads it from the object store — on its own node without a copy. The driver still
  receives each output once, because a `StepResult` holds its output (the store
  records it, references with paths follow it, the answer reads it). Outputs the
  resolver changed (a path into an output, a coerced value, an interpolated string)
  and outputs the executor re-parsed (JSON text) are new values and travel by value;
- **failures** look like local ones: an exception raised by the tool is re-raised as
  itself (``TOOL_ERROR``, "raised ValueError: ..."); a lost worker or node raises
  `WorkerLostError` (``TOOL_ERROR``, retried by the executor only for safe tools —
  Ray's own task retries are off, so an unsafe tool is never re-run behind the
  executor's back); a timeout cancels the task (``TOOL_TIMEOUT``).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.tools import BaseTool
from pydantic import BaseModel

from planexec._log import logger
from planexec.distributed._ray import ensure_ray, first_line, import_ray, worker_lost_errors
from planexec.distributed.settings import RayOptions, RaySettings
from planexec.errors import ToolLoadError
from planexec.tools import ToolSpec, invoke_tool, load_tools, normalize_output

__all__ = ["RayToolRunner", "WorkerLostError", "tool_options"]


class WorkerLostError(RuntimeError):
    """The Ray worker or node running a call was lost; the call's outcome is unknown."""


@dataclass(frozen=True)
class _StoredOutput:
    """An earlier tool output, passed to a task by reference (resolved in the worker)."""

    ref: Any
    """The Ray object reference of the tool's raw output."""


def tool_options(spec: ToolSpec, settings: RaySettings) -> RayOptions:
    """The Ray options of a tool's tasks.

    ``settings.default``, then ``tool.metadata["planexec"]["ray"]``, then
    ``settings.tool_options`` by name and by qualified name; later ones win.
    """
    options = settings.default
    meta = (spec.tool.metadata or {}).get("planexec")
    own = meta.get("ray") if isinstance(meta, Mapping) else None
    if isinstance(own, Mapping | RayOptions):
        options = options.merged(RayOptions.coerce(own))
    for key in (spec.name, spec.qualified_name):
        if key in settings.tool_options:
            options = options.merged(settings.tool_options[key])
    return options


# -- worker side -------------------------------------------------------------------------

_FACTORY_TOOLS: dict[str, dict[tuple[str | None, str], BaseTool]] = {}
_FACTORY_LOCK = threading.Lock()


def _factory_tool(factory: str, name: str, server: str | None) -> BaseTool:
    """Load (once per worker process) the tools of ``factory`` and return one by name."""
    with _FACTORY_LOCK:
        tools = _FACTORY_TOOLS.get(factory)
        if tools is None:
            tools = {}
            for tool in load_tools(factory):
                meta = (tool.metadata or {}).get("planexec")
                srv = meta.get("server") if isinstance(meta, Mapping) else None
                tools[(str(srv) if srv else None, tool.name)] = tool
            _FACTORY_TOOLS[factory] = tools
    found = tools.get((server, name)) or tools.get((None, name))
    if found is None:
        where = f"{server}.{name}" if server else name
        raise LookupError(f"tool {where!r} is not among the tools of {factory!r}")
    return found


def _fetch_stored(value: Any, get: Any) -> Any:
    if isinstance(value, _StoredOutput):
        structured, _ = normalize_output(get(value.ref))
        return structured
    if isinstance(value, dict):
        return {k: _fetch_stored(v, get) for k, v in value.items()}
    if isinstance(value, list):
        return [_fetch_stored(v, get) for v in value]
    return value


def _call_in_worker(
    tool: BaseTool | None,
    factory: str | None,
    name: str,
    server: str | None,
    args: dict[str, Any],
) -> Any:
    """The body of a tool task: fetch referenced outputs, call the tool, return its output."""
    ray = import_ray()
    args = _fetch_stored(args, ray.get)
    if tool is None:
        assert factory is not None
        tool = _factory_tool(factory, name, server)
    spec = ToolSpec(
        name=name,
        server=server,
        tool=tool,
        description="",
        args_schema=BaseModel,
        json_schema={},
    )
    return asyncio.run(invoke_tool(spec, args))


_REMOTE: Any = None
_REMOTE_LOCK = threading.Lock()


def _remote() -> Any:
    global _REMOTE
    with _REMOTE_LOCK:
        if _REMOTE is None:
            ray = import_ray()
            # No retries by Ray: whether a call may be repeated is the executor's call.
            _REMOTE = ray.remote(max_retries=0, retry_exceptions=False)(_call_in_worker)
        return _REMOTE


# -- driver side -------------------------------------------------------------------------


class RayToolRunner:
    """A `planexec.executor.ToolRunner` that runs each tool call as a Ray task.

    Example:
        >>> from planexec.executor import Executor
        >>> runner = RayToolRunner(RaySettings(default=RayOptions(num_cpus=0.5)))
        >>> # Executor(catalog, runner=runner) — the executor is otherwise unchanged.
    """

    def __init__(
        self,
        settings: RaySettings | None = None,
        *,
        init_kwargs: Mapping[str, Any] | None = None,
        max_kept: int = 1024,
    ) -> None:
        """Create a runner; Ray is joined (or started) at the first call.

        Args:
            settings: Address, tool loading and resources (`RaySettings`).
            init_kwargs: More ``ray.init`` arguments, used only if this process has not
                joined Ray yet.
            max_kept: Object references of outputs kept for later steps, at most (the
                oldest are dropped first; a dropped one is passed by value).
        """
        self.settings = settings or RaySettings()
        """The settings."""
        self.init_kwargs = dict(init_kwargs or {})
        """``ray.init`` arguments for a first connection."""
        self.max_kept = max_kept
        """Output references kept, at most."""
        self.calls = 0
        """Tool tasks submitted."""
        self.refs_passed = 0
        """Arguments passed to tasks as object references instead of values."""
        self._tool_refs: dict[int, tuple[BaseTool, Any]] = {}
        self._outputs: OrderedDict[int, tuple[Any, Any]] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: RaySettings | Mapping[str, Any] | None) -> RayToolRunner:
        """Build a runner from settings or a mapping of them."""
        if settings is None or isinstance(settings, RaySettings):
            return cls(settings)
        return cls(RaySettings.model_validate(dict(settings)))

    def options_for(self, spec: ToolSpec) -> RayOptions:
        """The Ray options a tool's tasks ask for (see `tool_options`)."""
        return tool_options(spec, self.settings)

    def object_ref(self, output: Any) -> Any | None:
        """The object reference an output returned by this runner came from, if kept."""
        with self._lock:
            kept = self._outputs.get(id(output))
        return kept[1] if kept is not None and kept[0] is output else None

    def clear(self) -> None:
        """Forget kept output references and shipped tools (their objects may be freed)."""
        with self._lock:
            self._outputs.clear()
            self._tool_refs.clear()

    def _tool_ref(self, ray: Any, tool: BaseTool) -> Any:
        with self._lock:
            kept = self._tool_refs.get(id(tool))
            if kept is not None and kept[0] is tool:
                return kept[1]
        try:
            ref = ray.put(tool)
        except Exception as exc:  # noqa: BLE001 - whatever pickling raises
            raise ToolLoadError(
                f"tool {tool.name!r} cannot be sent to the Ray workers "
                f"({type(exc).__name__}: {first_line(exc)}); load the tools inside the "
                f"workers instead: executor.ray.tools = 'MODULE:ATTR' (RaySettings.tools)"
            ) from exc
        with self._lock:
            self._tool_refs[id(tool)] = (tool, ref)
        return ref

    def _by_ref(self, value: Any) -> Any:
        """Replace outputs this runner returned with their object references."""
        if not self.settings.pass_refs:
            return value
        ref = self.object_ref(value)
        if ref is not None:
            self.refs_passed += 1
            return _StoredOutput(ref)
        if isinstance(value, dict):
            return {k: self._by_ref(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._by_ref(v) for v in value]
        return value

    def _keep(self, output: Any, ref: Any) -> None:
        if output is None or isinstance(output, str | int | float | bool):
            return  # small scalars: by value is as cheap, and ids of interned values lie
        with self._lock:
            self._outputs[id(output)] = (output, ref)
            self._outputs.move_to_end(id(output))
            while len(self._outputs) > self.max_kept:
                self._outputs.popitem(last=False)

    async def call(self, spec: ToolSpec, args: dict[str, Any]) -> Any:
        """Run the tool as a Ray task and return its raw output.

        Raises:
            WorkerLostError: the worker or node running the task was lost.
            ToolLoadError: the tool cannot be pickled (use ``RaySettings.tools``).
            Exception: what the tool raised, as itself.
        """
        ray = ensure_ray(self.settings.address, **self.init_kwargs)
        factory = self.settings.tools
        tool_arg = None if factory else self._tool_ref(ray, spec.tool)
        options = self.options_for(spec).to_ray()
        task_args = self._by_ref(dict(args))
        remote = _remote().options(**options) if options else _remote()
        ref = remote.remote(tool_arg, factory, spec.name, spec.server, task_args)
        self.calls += 1
        try:
            raw = await ref
        except asyncio.CancelledError:
            # A timeout or a cancelled run: stop the task too (best effort).
            try:
                ray.cancel(ref)
            except Exception as exc:  # noqa: BLE001 - cancelling is best effort
                logger.warning("could not cancel the Ray task of tool {}: {}", spec.name, exc)
            raise
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, Exception):
                raise cause from None
            raise RuntimeError(str(exc)) from None
        except worker_lost_errors() as exc:
            raise WorkerLostError(
                f"the Ray worker running tool {spec.qualified_name!r} was lost "
                f"({type(exc).__name__}: {first_line(exc)}); the call's outcome is unknown"
            ) from exc
        self._keep(raw, ref)
        return raw
