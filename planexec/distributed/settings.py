"""Settings of the Ray backend: `RayOptions` and `RaySettings` (re-exported).

They are defined in `planexec._ray_settings` (pure pydantic), outside this package, so
that `planexec.config` can use them without importing the Ray backend.
"""

from __future__ import annotations

from planexec._ray_settings import RayOptions, RaySettings

__all__ = ["RayOptions", "RaySettings"]
