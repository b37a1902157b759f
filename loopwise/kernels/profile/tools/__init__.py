"""Micro-profiling tools, one per module; each module exposes its tool object as ``TOOL``.

They are registered as entry points (group ``loopwise.kernels.tools``, see ``pyproject.toml``);
``loopwise.kernels.profile.registry`` loads them, or these modules directly from a source checkout.
"""
