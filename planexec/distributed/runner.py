"""`RayToolRunner`: the executor's tool calls on Ray.

The executor stays the same (DAG, resolution, invariants, retries, timeouts, circuit
breakers, events); only the `ToolRunner` changes. Each call runs on Ray, in one of two
ways:

- **in an actor (the default)**: each tool lives in a Ray actor for as long as the
  runner does, and every call of that tool goes to it, so the tool's in-process state
  (counters, caches, a work-order book, a ``fail_times`` countdown) persists between
  calls exactly as it does locally. The runner starts one actor per distinct resource
  request (``num_cpus``, ``num_gpus``, ``memory``, custom ``resources``), at the first
  call of a tool asking for it, and the actor holds that request for its life; tools
  that ask for nothing share an actor that reserves nothing. Tools of one catalog
  that go to the same actor are pickled together, so state they share with each other
  (the demo's work-order book) stays shared. Calls to an actor run concurrently on its
  event loop (sync tools in its thread pool), as locally;
- **as a stateless task (opt in)**: a tool whose options say ``stateless = true``
  (``tool.metadata["planexec"]["ray"]["stateless"]``, ``RaySettings.tool_options`` or
  ``default``) runs each call as a Ray task with its resource request, anywhere in the
  cluster — for pure, heavy tools that should fan out; each call gets a fresh copy of
  the tool, so in-process state does not carry over.

Either way:

- **the tool** travels pickled (cloudpickle, put once per tool in the object store), or,
  with ``tools="MODULE:ATTR"``, is loaded inside the worker by name — for tools that do
  not pickle (open connections, MCP sessions);
- **resources** per tool: ``default`` ← ``tool.metadata["planexec"]["ray"]`` ←
  ``tool_options[name]`` (later wins);
- **outputs stay in the object store**: the runner keeps, for each output it returned,
  the Ray object reference it came from. When a later step's resolved arguments hold
  that very output (a whole-value reference ``<step_2>``, possibly nested in a dict or
  list), the call receives the object reference instead of the value, and the worker
  reads it from the object store — on its own node without a copy. The driver still
  receives each output once, because a `StepResult` holds its output (the store
  records it, references with paths follow it, the answer reads it). Outputs the
  resolver changed (a path into an output, a coerced value, an interpolated string)
  and outputs the executor re-parsed (JSON text) are new values and travel by value;
- **failures** look like local ones: an exception raised by the tool is re-raised as
  itself (``TOOL_ERROR``, "raised ValueError: ..."); a lost worker, actor or node
  raises `WorkerLostError` (``TOOL_ERROR``, retried by the executor only for safe
  tools, on a new actor — the lost one's state is gone; Ray's own retries and actor
  restarts are off, so an unsafe tool is never re-run behind the executor's back); a
  timeout cancels the call (``TOOL_TIMEOUT``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.tools import BaseTool
from pydantic import BaseModel

from planexec._log import logger
from planexec.distributed._ray import ensure_ray, first_line, import_ray, worker_lost_errors
from planexec.distributed.settings import RayOptions, RaySettings
from planexec.errors import ConfigError, RetryableToolError, ToolLoadError, require_extra
from planexec.tools import ToolSpec, invoke_tool, load_tools, normalize_output

__all__ = ["RayToolRunner", "WorkerLostError", "runner_for", "tool_options"]


class WorkerLostError(RetryableToolError):
    """The Ray worker or node running a call was lost; the call's outcome is unknown.

    Transient: another worker may succeed, so a safe tool's call is retried by class
    (`planexec.resilience.default_tool_retry_on`); an unsafe one never is.
    """


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


async def _afetch_stored(value: Any) -> Any:
    """`_fetch_stored` for an async actor: await references instead of blocking on them."""
    if isinstance(value, _StoredOutput):
        structured, _ = normalize_output(await value.ref)
        return structured
    if isinstance(value, dict):
        return {k: await _afetch_stored(v) for k, v in value.items()}
    if isinstance(value, list):
        return [await _afetch_stored(v) for v in value]
    return value


class _ToolHost:
    """The actor that hosts tools: each keeps its in-process state between calls."""

    def __init__(self) -> None:
        self.tools: dict[str, ToolSpec] = {}

    async def add(
        self,
        keys: list[str],
        names: list[str],
        servers: list[str | None],
        shipped: list[Any],
        factory: str | None,
    ) -> None:
        """Take in tools, shipped together or loaded by ``factory``.

        ``shipped`` is ``[object ref of the list of tools]`` (pickled together, so state
        they share stays shared), or empty (load them by ``factory`` in this process).
        """
        if shipped:
            tools = list(await shipped[0])
        else:
            assert factory is not None
            tools = [_factory_tool(factory, n, s) for n, s in zip(names, servers, strict=True)]
        for key, name, server, tool in zip(keys, names, servers, tools, strict=True):
            self.tools.setdefault(
                key,
                ToolSpec(
                    name=name,
                    server=server,
                    tool=tool,
                    description="",
                    args_schema=BaseModel,
                    json_schema={},
                ),
            )

    async def call(self, key: str, args: dict[str, Any]) -> Any:
        """Call a tool taken in by `add` (on this actor's event loop, as locally)."""
        args = await _afetch_stored(args)
        return await invoke_tool(self.tools[key], args)


_HOST: Any = None


def _host_class() -> Any:
    global _HOST
    with _REMOTE_LOCK:
        if _HOST is None:
            ray = import_ray()
            # No restarts, no task retries: a lost actor's calls are the executor's call.
            _HOST = ray.remote(max_restarts=0, max_task_retries=0)(_ToolHost)
        return _HOST


# -- driver side -------------------------------------------------------------------------


@dataclass
class _Hosted:
    """A tool taken in by a host actor (driver side)."""

    tool: BaseTool
    """The tool (kept so its id is not reused while it is hosted)."""
    host: Any
    """The actor's handle."""
    key: str
    """The tool's key in the actor."""
    ready: Any
    """The object reference of the ``add`` call (awaited before each call)."""


class RayToolRunner:
    """A `planexec.executor.ToolRunner` that runs tool calls on Ray.

    Each tool lives in a Ray actor (created at its first call), so its state persists
    between calls as it does locally; tools marked ``stateless`` run each call as a Ray
    task instead (see the module docstring). The actors live as long as the runner (or
    until `close`).

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
        """Tool calls submitted (to actors and as tasks)."""
        self.tasks = 0
        """Of those, calls run as stateless tasks."""
        self.actors = 0
        """Tool actors started."""
        self.refs_passed = 0
        """Arguments passed to calls as object references instead of values."""
        self._tool_refs: dict[int, tuple[BaseTool, Any]] = {}
        self._hosts: dict[int, _Hosted] = {}
        self._groups: dict[int, tuple[BaseTool, list[ToolSpec]]] = {}
        self._actors: dict[str, Any] = {}
        self._keys = itertools.count(1)
        self._outputs: OrderedDict[int, tuple[Any, Any]] = OrderedDict()
        self._lock = threading.RLock()

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
        """Forget kept output references, shipped tools and tool actors.

        Forgotten actors stop once no handle to them is left, and their tools' state
        with them; the next call of a tool starts a new actor.
        """
        with self._lock:
            self._outputs.clear()
            self._tool_refs.clear()
            self._hosts.clear()
            self._groups.clear()
            self._actors.clear()

    def close(self) -> None:
        """Stop the tool actors now (their resources are freed) and `clear` the runner."""
        with self._lock:
            hosts = {id(e.host): e.host for e in self._hosts.values()}
            hosts.update((id(a), a) for a in self._actors.values())
        if hosts:
            ray = import_ray()
            for host in hosts.values():
                try:
                    ray.kill(host)
                except Exception as exc:  # noqa: BLE001 - stopping is best effort
                    logger.warning("could not stop a Ray tool actor: {}", exc)
        self.clear()

    def attach_catalog(self, catalog: Iterable[ToolSpec]) -> None:
        """Note which tools come together (the `Executor` calls this with its catalog).

        Tools of one catalog that ask for the same resources are shipped to their actor
        together, in one pickle, so state they share — the demo's work-order book, a
        client object — stays shared on Ray as it is locally.
        """
        specs = list(catalog)
        with self._lock:
            for spec in specs:
                kept = self._groups.get(id(spec.tool))
                if kept is None or kept[0] is not spec.tool:
                    self._groups[id(spec.tool)] = (spec.tool, specs)

    def _is_hosted(self, tool: BaseTool) -> _Hosted | None:
        entry = self._hosts.get(id(tool))
        return entry if entry is not None and entry.tool is tool else None

    def _ship(self, ray: Any, specs: list[ToolSpec]) -> tuple[list[ToolSpec], list[Any]]:
        """Put tools in the object store together; the ones shipped and ``[their ref]``."""
        if self.settings.tools:
            return specs, []  # loaded in the worker by name
        try:
            return specs, [ray.put([s.tool for s in specs])]
        except Exception as exc:  # noqa: BLE001 - whatever pickling raises
            if len(specs) > 1:
                logger.warning(
                    "tools {} could not be sent to Ray together ({}: {}); sending tool {!r} "
                    "alone (state it shares with the others is copied)",
                    [s.name for s in specs], type(exc).__name__, first_line(exc), specs[0].name,
                )
                return self._ship(ray, specs[:1])
            raise ToolLoadError(
                f"tool {specs[0].name!r} cannot be sent to the Ray workers "
                f"({type(exc).__name__}: {first_line(exc)}); load the tools inside the "
                f"workers instead: executor.ray.tools = 'MODULE:ATTR' (RaySettings.tools)"
            ) from exc

    def _hosted(self, ray: Any, spec: ToolSpec, options: RayOptions) -> _Hosted:
        """The actor hosting a tool: found, or started (or shared) and given the tool."""
        with self._lock:
            entry = self._is_hosted(spec.tool)
            if entry is not None:
                return entry
            request = options.to_ray()
            kept = self._groups.get(id(spec.tool))
            group = kept[1] if kept is not None and kept[0] is spec.tool else [spec]
            # The tool goes with its catalog's other tools that ask for the same resources
            # and are not hosted yet: one pickle, so state they share stays shared.
            specs, shipped = self._ship(ray, [spec] + [
                s for s in group
                if s.tool is not spec.tool
                and self._is_hosted(s.tool) is None
                and not self.options_for(s).stateless
                and self.options_for(s).to_ray() == request
            ])
            host_key = json.dumps(request, sort_keys=True)
            host = self._actors.get(host_key)
            if host is None:
                # No request: an actor that reserves nothing (Ray's own default would
                # need a free CPU to place it, which busy run tasks may all hold).
                host = _host_class().options(**(request or {"num_cpus": 0})).remote()
                self._actors[host_key] = host
                self.actors += 1
            keys = [f"{s.qualified_name}#{next(self._keys)}" for s in specs]
            ready = host.add.remote(
                keys,
                [s.name for s in specs],
                [s.server for s in specs],
                shipped,
                self.settings.tools,
            )
            for key, s in zip(keys, specs, strict=True):
                self._hosts[id(s.tool)] = _Hosted(s.tool, host, key, ready)
            return self._hosts[id(spec.tool)]

    def _lost(self, host: Any) -> None:
        """Forget a lost actor (and its tools): their next call starts a new one."""
        with self._lock:
            for k, entry in list(self._hosts.items()):
                if entry.host is host:
                    del self._hosts[k]
            for request, actor in list(self._actors.items()):
                if actor is host:
                    del self._actors[request]
        try:
            import_ray().kill(host)
        except Exception as exc:  # noqa: BLE001 - it may be gone already
            logger.debug("lost Ray tool actor not killed: {}", exc)

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
        """Call the tool in its actor (or as a task, when stateless); return its raw output.

        Raises:
            WorkerLostError: the worker or node running the task was lost.
            ToolLoadError: the tool cannot be pickled (use ``RaySettings.tools``).
            Exception: what the tool raised, as itself.
        """
        ray = ensure_ray(self.settings.address, **self.init_kwargs)
        options = self.options_for(spec)
        hosted: _Hosted | None = None
        ref: Any = None
        if options.stateless:
            factory = self.settings.tools
            tool_arg = None if factory else self._tool_ref(ray, spec.tool)
            request = options.to_ray()
            remote = _remote().options(**request) if request else _remote()
            ref = remote.remote(
                tool_arg, factory, spec.name, spec.server, self._by_ref(dict(args))
            )
            self.tasks += 1
        else:
            hosted = self._hosted(ray, spec, options)
        self.calls += 1
        try:
            if hosted is not None:
                await hosted.ready
                ref = hosted.host.call.remote(hosted.key, self._by_ref(dict(args)))
            raw = await ref
        except asyncio.CancelledError:
            # A timeout or a cancelled run: stop the call too (best effort).
            if ref is not None:
                try:
                    ray.cancel(ref)
                except Exception as exc:  # noqa: BLE001 - cancelling is best effort
                    logger.warning("could not cancel the Ray call of tool {}: {}", spec.name, exc)
            raise
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, Exception):
                raise cause from None
            raise RuntimeError(str(exc)) from None
        except worker_lost_errors() as exc:
            if hosted is not None:
                self._lost(hosted.host)
            raise WorkerLostError(
                f"the Ray worker running tool {spec.qualified_name!r} was lost "
                f"({type(exc).__name__}: {first_line(exc)}); the call's outcome is unknown"
            ) from exc
        self._keep(raw, ref)
        return raw


def runner_for(backend: str, settings: RaySettings | None = None) -> RayToolRunner | None:
    """The tool runner of a backend: None for ``local`` (the executor's default).

    Raises:
        ConfigError: an unknown backend.
        MissingExtraError: ``ray`` without Ray installed.
    """
    if backend == "local":
        return None
    if backend == "ray":
        require_extra("ray", "ray")
        return RayToolRunner(settings)
    raise ConfigError(f"unknown executor backend {backend!r} (use 'local' or 'ray')")
