"""Reading scenario files: bundled names, bounded safe YAML, dotted overrides, and
`load_scenario`, which validates and then runs the checks that need the world."""

from __future__ import annotations

import difflib
import typing
import warnings
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    ValidationError,
)

from recourse_sim.errors import ConfigError
from recourse_sim.scenarios.checks import _check_semantics
from recourse_sim.scenarios.messages import _format_error
from recourse_sim.scenarios.populations import Population
from recourse_sim.scenarios.scenario import Scenario


def _bundled_dir() -> Path | None:
    """The folder of bundled scenarios: package data when installed, ``scenarios/`` in a
    source checkout (an editable install)."""
    installed = files("recourse_sim") / "_bundled_scenarios"
    if installed.is_dir():
        return Path(str(installed))
    checkout = Path(__file__).resolve().parents[2] / "scenarios"
    if (checkout / "school_assignment.yaml").is_file():
        return checkout
    return None


def list_scenarios() -> list[str]:
    """Names of the bundled scenarios, sorted."""
    folder = _bundled_dir()
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder else []


def scenario_description(path_or_name: str | Path) -> str:
    """A scenario file's ``description``, read without validating the rest (fast: no
    dataset, learner or torch is loaded; `load_scenario` checks everything)."""
    path = scenario_path(path_or_name)
    description = _read_yaml(path).get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"{path}: description must be text, got {type(description).__name__}")
    return description


def scenario_path(path_or_name: str | Path) -> Path:
    """The file of a bundled scenario name, or the given path (must exist)."""
    p = Path(path_or_name)
    if p.suffix in (".yaml", ".yml") or p.exists() or len(p.parts) > 1:
        if not p.is_file():
            raise ConfigError(f"scenario file {str(p)!r} does not exist")
        return p
    folder = _bundled_dir()
    if folder is not None and (folder / f"{p.name}.yaml").is_file():
        return folder / f"{p.name}.yaml"
    names = list_scenarios()
    close = difflib.get_close_matches(str(path_or_name), names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(
        f"unknown scenario {str(path_or_name)!r}{hint} (bundled: {', '.join(names)}; "
        "or give a path to a .yaml file)"
    )


def load_scenario(
    path_or_name: str | Path | dict,
    overrides: dict[str, object] | list[str] | None = None,
) -> Scenario:
    """Load, override and validate a scenario.

    Parameters
    ----------
    path_or_name: a bundled scenario name (see `list_scenarios`), a path to a YAML
        file, or an already-parsed mapping (relative CSV paths then resolve against the
        working directory).
    overrides: dotted keys set before validation, as ``{"learner.type": "mlp"}`` or
        ``["learner.type=mlp", "rounds=20"]`` (the value after ``=`` is parsed as YAML).

    Raises ConfigError (one line: file, dotted field, bad value) on any problem.
    """
    try:
        return _load_scenario(path_or_name, overrides)
    except ConfigError as exc:
        message = str(exc)
        if any(c in message for c in "\n\r"):  # a key or file name with a line break
            one_line = message.replace("\r", "\\r").replace("\n", "\\n")
            raise type(exc)(one_line) from None
        raise


def _load_scenario(
    path_or_name: str | Path | dict,
    overrides: dict[str, object] | list[str] | None,
) -> Scenario:
    if isinstance(path_or_name, dict):
        source, base_dir, data = "<dict>", Path.cwd(), _deepcopy(path_or_name)
        default_name = "custom"
    else:
        path = scenario_path(path_or_name)
        source, base_dir, default_name = str(path), path.resolve().parent, path.stem
        data = _read_yaml(path)
    for key, value in _parse_overrides(overrides):
        _set_dotted(data, key, value, source)
    data.setdefault("name", default_name)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc, data, source)) from None
    scenario._source = source
    _check_semantics(scenario, data, source, base_dir)
    return scenario


def _deepcopy(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _deepcopy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_deepcopy(v) for v in obj]
    return obj


MAX_SCENARIO_BYTES = 1_000_000  # a scenario file is a page of settings, never data
MAX_YAML_ALIASES = 10  # aliases (*name) per document: reuse enough, too few to bomb
MAX_YAML_DEPTH = 50  # nesting of mappings and lists


class _StrictSafeLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that also refuses a key given twice in one mapping, and bounds
    what a document can make it do: at most `MAX_YAML_ALIASES` aliases (so "billion
    laughs" documents cannot expand) and `MAX_YAML_DEPTH` levels of nesting."""

    def __init__(self, stream):
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"more than {MAX_YAML_ALIASES} aliases",
                    self.peek_event().start_mark,
                )
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"nested deeper than {MAX_YAML_DEPTH} levels",
                    self.peek_event().start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:  # an unhashable key: SafeLoader reports it below
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _safe_load(text: str) -> Any:
    return yaml.load(text, Loader=_StrictSafeLoader)  # a SafeLoader: never constructs objects


MAX_OVERRIDE_CHARS = 10_000


def _clipped(text: str, limit: int = 60) -> str:
    """`text` quoted for an error line, cut to `limit` characters."""
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _short_reason(exc: BaseException) -> str:
    """An exception's reason in at most 120 characters, on one line."""
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    text = " ".join(str(text).split())
    return text if len(text) <= 120 else text[:117] + "..."


def _yaml_problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    prefix = "could not determine a constructor for the tag "
    if problem.startswith(prefix):
        tag = problem[len(prefix) :].strip("'").replace("tag:yaml.org,2002:", "!!")
        return f"tag {tag!r} is not allowed (scenario files hold plain data, never objects)"
    return problem


def _read_yaml(path: Path) -> dict:
    try:
        if not path.is_file():
            raise ConfigError(f"{path}: not a regular file")
        with open(path, "rb") as f:
            raw = f.read(MAX_SCENARIO_BYTES + 1)
        if len(raw) > MAX_SCENARIO_BYTES:
            raise ConfigError(
                f"{path}: larger than {MAX_SCENARIO_BYTES:,} bytes; a scenario file holds "
                "settings (data belongs in a CSV file it names)"
            )
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read scenario file ({_short_reason(exc)})") from None
    try:
        data = _safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: invalid YAML{where}: {_yaml_problem(exc)}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a scenario must be a mapping, got {type(data).__name__}")
    return data


def _parse_overrides(overrides: dict[str, object] | list[str] | None) -> list[tuple[str, Any]]:
    if overrides is None:
        return []
    if isinstance(overrides, dict):
        return list(overrides.items())
    parsed = []
    for item in overrides:
        key, sep, text = str(item).partition("=")
        shown = _clipped(str(item))
        if not sep or not key.strip():
            raise ConfigError(f"override {shown} must look like key.path=value")
        if len(text) > MAX_OVERRIDE_CHARS:
            raise ConfigError(
                f"override {shown}: value longer than {MAX_OVERRIDE_CHARS} characters"
            )
        try:
            value = _safe_load(text)  # the same bounds as a scenario file
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {shown}: not valid YAML ({_yaml_problem(exc)})") from None
        parsed.append((key.strip(), value))
    return parsed


def _set_dotted(data: dict, key: str, value: Any, source: str) -> None:
    parts = key.split(".")
    if any(not p for p in parts):
        raise ConfigError(f"override key {key!r} has an empty component")
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        where = ".".join(parts[: i + 1])
        if isinstance(node, list):
            child = node[_index(part, node, where)]
        else:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
        if not isinstance(child, dict | list):
            shown = repr(child) if len(repr(child)) <= 80 else type(child).__name__
            raise ConfigError(f"{source}: override {key}: {where} is {shown}, not a mapping")
        node = child
    last = parts[-1]
    if isinstance(node, list):
        node[_index(last, node, key)] = value
    elif value is None and len(parts) == 2 and parts[0] == "populations":
        node.pop(last, None)  # populations.NAME=null: no such population
    else:
        node[last] = value
        if len(parts) == 3 and parts[0] == "populations" and last == "strategy":
            _keep_settings_of(node, value, key)


def _keep_settings_of(population: dict, strategy: Any, key: str) -> None:
    """After ``populations.NAME.strategy=NEW``: drop the settings NEW does not take
    (saying which), so switching a population's strategy is one override."""
    models = {
        typing.get_args(m.model_fields["strategy"].annotation)[0]: m
        for m in typing.get_args(typing.get_args(Population)[0])
    }
    model = models.get(strategy) if isinstance(strategy, str) else None
    if model is None:  # (an unknown strategy, or not a name: validation names it)
        return
    dropped = [k for k in population if k not in model.model_fields]
    for k in dropped:
        del population[k]
    if dropped:
        warnings.warn(
            f"override {key}={strategy}: dropped {', '.join(map(str, dropped))} "
            f"(not settings of {strategy})",
            stacklevel=5,
        )


def _index(part: str, node: list, where: str) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise ConfigError(f"override {where}: {part!r} is not an index of a list of {len(node)}")
    return int(part)
