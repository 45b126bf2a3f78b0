"""Running a command's coroutine so that Ctrl-C always works (internal).

`asyncio.run` waits, on its way out, for every task it cancelled and for the threads of
the loop's default executor: a tool that ignores cancellation, or a sync tool stuck in
its thread, made ``planexec run`` impossible to stop. `run_interruptible` instead:

- on the first Ctrl-C (SIGINT), cancels the command's task: the run records its
  cancelled steps and ends ``CANCELLED``, then the command exits 130 (``planexec:
  interrupted``);
- on the second Ctrl-C, exits the process at once (status 130), whatever is running;
- when the command's task is done, cancels what is left (abandoned tool calls) and
  waits for it at most `SHUTDOWN_GRACE` seconds, never for a thread.

On POSIX the count is kept by a thread of its own, woken by the interpreter's signal
wake-up file descriptor (written by the C-level handler the moment a signal arrives),
not by a Python handler: Python runs those only in the main thread, between bytecodes,
so a tool blocking the event loop in code that does not return to the interpreter (or
a signal landing just before the main thread blocks again) delayed the second Ctrl-C
until the tool returned.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager, suppress
from typing import Any, TextIO, TypeVar

__all__ = ["SHUTDOWN_GRACE", "InterruptHandler", "run_interruptible"]

T = TypeVar("T")

SHUTDOWN_GRACE = 1.0
"""Seconds given to the tasks left when a command's coroutine ends (abandoned calls)."""

EXIT_INTERRUPTED = 130
"""The exit status of a command stopped by Ctrl-C (128 + SIGINT)."""


class InterruptHandler:
    """The SIGINT handler: the first signal cancels, the second exits at once."""

    def __init__(
        self,
        cancel: Callable[[], None],
        *,
        exit: Callable[[int], Any] = os._exit,  # noqa: A002 - the name says what it does
        stderr: TextIO | None = None,
    ) -> None:
        """Build the handler.

        Args:
            cancel: Called on the first signal (from the signal handler: it must only
                schedule the cancellation, e.g. with ``loop.call_soon_threadsafe``).
            exit: Called with 130 on the second signal (`os._exit` by default: no
                cleanup, no waiting for threads).
            stderr: Where the messages go (``sys.stderr`` at the time by default).
        """
        self.cancel = cancel
        """Called on the first signal."""
        self.exit = exit
        """Called on the second signal."""
        self.stderr = stderr
        self.count = 0
        """Signals received so far."""

    def _say(self, message: str) -> None:
        try:
            if self.stderr is not None:
                print(message, file=self.stderr, flush=True)
                return
            try:
                fd = sys.stderr.fileno()
            except (AttributeError, OSError, ValueError):  # a replaced stderr (no file)
                print(message, file=sys.stderr, flush=True)
                return
            # Straight to the descriptor: the main thread may hold sys.stderr's lock.
            os.write(fd, (message + "\n").encode("utf-8", "replace"))
        except (OSError, ValueError):  # a closed or broken stderr must not stop the exit
            pass

    def __call__(self, signum: int = signal.SIGINT, frame: Any = None) -> None:
        """Handle one SIGINT."""
        self.count += 1
        if self.count == 1:
            self.cancel()
            self._say("planexec: interrupted: stopping the run (Ctrl-C again to exit at once)")
            return
        self._say("planexec: interrupted again: exiting now")
        self.exit(EXIT_INTERRUPTED)


def run_interruptible(
    coro: Coroutine[Any, Any, T],
    *,
    handler_factory: Callable[[Callable[[], None]], InterruptHandler] = InterruptHandler,
) -> T:
    """Run ``coro`` on a new event loop, with `InterruptHandler` on SIGINT.

    The handler is installed only in the main thread, and the previous one is put back
    afterwards.

    Args:
        coro: The command's coroutine.
        handler_factory: Builds the handler from the cancel function (tests).

    Returns:
        What ``coro`` returns.

    Raises:
        KeyboardInterrupt: the coroutine was cancelled by a first Ctrl-C.
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    task = loop.create_task(coro)

    def cancel() -> None:  # from the signal handler: only schedule it
        loop.call_soon_threadsafe(task.cancel)

    handler = handler_factory(cancel)
    try:
        with _on_sigint(handler):
            try:
                return loop.run_until_complete(task)
            except asyncio.CancelledError:
                if handler.count:
                    raise KeyboardInterrupt from None
                raise
            finally:
                _shutdown(loop)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def _ignore(signum: int, frame: Any) -> None:
    """The Python-level SIGINT handler while a watcher thread counts (no KeyboardInterrupt)."""


@contextmanager
def _on_sigint(handler: Callable[[int], Any]) -> Iterator[None]:
    """Call ``handler(signal.SIGINT)`` on each SIGINT while the block runs.

    In the main thread on POSIX, a daemon thread reads the signal wake-up descriptor and
    calls the handler (bytes of other signals are passed on to the descriptor set before,
    if any); elsewhere in the main thread the handler is the Python-level one. Outside the
    main thread nothing is installed (signals are the main thread's). The previous handler
    and descriptor are put back afterwards.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: Any = signal.getsignal(signal.SIGINT)
    if os.name != "posix":
        signal.signal(signal.SIGINT, lambda signum, frame: handler(signum))
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    before = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    signal.signal(signal.SIGINT, _ignore)
    watcher = threading.Thread(
        target=_watch, args=(read_fd, before, handler), name="planexec-sigint", daemon=True
    )
    watcher.start()
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        try:
            signal.set_wakeup_fd(before)
        except (OSError, ValueError):  # closed by its owner meanwhile: none is left set
            signal.set_wakeup_fd(-1)
        os.close(write_fd)  # the watcher reads end-of-file and returns
        watcher.join(SHUTDOWN_GRACE)
        if not watcher.is_alive():
            os.close(read_fd)


def _watch(read_fd: int, forward_fd: int, handler: Callable[[int], Any]) -> None:
    """Read signal numbers from the wake-up pipe until it closes; SIGINT calls ``handler``."""
    while True:
        data = os.read(read_fd, 64)
        if not data:
            return
        if forward_fd >= 0 and any(b != signal.SIGINT for b in data):
            with suppress(OSError):
                os.write(forward_fd, bytes(b for b in data if b != signal.SIGINT))
        for byte in data:
            if byte == signal.SIGINT:
                handler(signal.SIGINT)


def _shutdown(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks left and wait for them (and async generators) a bounded time."""
    left = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in left:
        task.cancel()
    if left:
        loop.run_until_complete(asyncio.wait(left, timeout=SHUTDOWN_GRACE))
    for task in left:
        if not task.done():
            # An abandoned call that ignores cancellation: it is dropped with the loop,
            # on purpose (the run already reported it); asyncio need not warn about it.
            task._log_destroy_pending = False  # type: ignore[attr-defined]  # noqa: SLF001
    loop.run_until_complete(_bounded(loop.shutdown_asyncgens()))
    # The default executor's threads are not joined: a stuck one would block the exit.


async def _bounded(coro: Coroutine[Any, Any, None]) -> None:
    try:
        await asyncio.wait_for(coro, SHUTDOWN_GRACE)
    except TimeoutError:
        pass
