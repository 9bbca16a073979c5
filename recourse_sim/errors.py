"""Typed errors. Everything a user can get wrong raises a subclass of `RecourseSimError`.

Each message is one line that names the offending file, field or value, so the
command line can print it as ``error: <message>`` without a traceback.
"""

from __future__ import annotations


class RecourseSimError(Exception):
    """Base class of every error caused by user input (data, scenario, arguments)."""


class ConfigError(RecourseSimError, ValueError):
    """A parameter or scenario field has a bad value; the message names the field and value."""


class InfeasibleActionSetError(ConfigError):
    """An action set's declaration cannot be satisfied (e.g. lower bound above upper bound)."""


class DataError(RecourseSimError):
    """A data file is missing, unreadable or malformed; the message names the file."""


class NotFittedError(RecourseSimError, AttributeError):
    """A learner was used before `fit`."""


class CheckpointError(RecourseSimError):
    """A checkpoint is missing, truncated or corrupt."""


class DependencyNotInstalled(RecourseSimError, ImportError):
    """An optional dependency (an extra) is needed but not installed."""
