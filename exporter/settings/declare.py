"""Settings declared once, as fields of frozen dataclasses: the flag, its environment
variable, its default, its help and its documentation live in one :class:`Setting`, and the
command line (exporter.commandline), the typed settings (:func:`build`) and
docs/configuration.md (exporter.settings.docs) are derived from it.

    @dataclass(frozen=True, slots=True)
    class AgentSettings:
        sync_period: float = setting("--sync-period", "10s", "how often ...", POSITIVE_DURATION)
        server: ServerSettings = group(ServerSettings)     # another class's settings, nested
        policy: GuardPolicy = group(GuardSettings, builds=GuardPolicy)  # a model value

The field's default is the declared default, parsed: ``AgentSettings()`` is what the command
line gives without flags or environment. A group that ``builds`` a model value holds that value
(a dataclass of exporter.model with the same field names), built from the settings declared by
the group's class: the model knows no flags. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from exporter.settings.values import TEXT, AnyKind

T = TypeVar("T")

PREFIX = "NODESYNC_"
_SETTING = "nodesync.setting"
_GROUP = "nodesync.group"
_BUILDS = "nodesync.builds"


def env_name(flag: str) -> str:
    """``--web.listen-address`` → ``NODESYNC_WEB_LISTEN_ADDRESS``."""
    return PREFIX + re.sub(r"[^A-Za-z0-9]", "_", flag.lstrip("-")).upper()


def dest_name(flag: str) -> str:
    """``--web.listen-address`` → ``web_listen_address`` (the argparse destination)."""
    return re.sub(r"[^A-Za-z0-9]", "_", flag.lstrip("-"))


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting. ``default`` is written as a user would write it (``"10s"``); ``doc`` is
    the Markdown of docs/configuration.md (the help when empty); ``aliases`` are former flag
    names, still accepted with a deprecation warning."""

    flag: str
    default: str
    help: str
    kind: AnyKind = TEXT
    env: str = ""
    doc: str = ""
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.flag.startswith("--"):
            raise ValueError(f"a flag starts with --: {self.flag!r}")
        self.kind(self.default)  # a default that does not parse is a bug: fail at import

    @property
    def environment(self) -> str:
        """The environment variable whose value is the default (``NODESYNC_...``)."""
        return self.env or env_name(self.flag)

    @property
    def dest(self) -> str:
        return dest_name(self.flag)

    @property
    def documentation(self) -> str:
        return self.doc or self.help

    def value(self) -> Any:
        """The default, parsed."""
        return self.kind(self.default)

    def field(self) -> Any:
        """A dataclass field holding this setting (its default is the parsed default)."""
        return dataclasses.field(default=self.value(), metadata={_SETTING: self})


def setting(
    flag: str,
    default: str,
    help: str,
    kind: AnyKind = TEXT,
    *,
    env: str = "",
    doc: str = "",
    aliases: tuple[str, ...] = (),
) -> Any:
    """A dataclass field declaring a setting of its own (see :class:`Setting`)."""
    return Setting(flag, default, help, kind, env=env, doc=doc, aliases=aliases).field()


def group(cls: type[Any], *, builds: type[Any] | None = None) -> Any:
    """A dataclass field holding another class's settings (declared there); with ``builds``,
    the model value built from them (see :func:`model_of`)."""
    if builds is None:
        return dataclasses.field(default_factory=cls, metadata={_GROUP: cls})
    model = builds
    return dataclasses.field(
        default_factory=lambda: model_of(cls(), model), metadata={_GROUP: cls, _BUILDS: builds}
    )


def model_of(settings: object, model: type[T]) -> T:
    """The model value ``model`` (a dataclass with the same field names) that ``settings``
    declare."""
    names = (f.name for f in dataclasses.fields(settings))  # type: ignore[arg-type]
    return model(**{name: getattr(settings, name) for name in names})


def _declared(settings: object, cls: type[Any] | None) -> Iterator[tuple[Any, Any]]:
    """Each field ``cls`` declares (``settings``' class by default) and its value in
    ``settings`` (which may be the model value a group builds)."""
    for f in dataclasses.fields(cls or settings):  # type: ignore[arg-type]
        yield f, getattr(settings, f.name)


def settings_of(cls: type[Any]) -> Iterator[Setting]:
    """Every setting ``cls`` declares, its groups' included, in declaration order."""
    for f in dataclasses.fields(cls):
        if (declared := f.metadata.get(_SETTING)) is not None:
            yield declared
        elif (nested := f.metadata.get(_GROUP)) is not None:
            yield from settings_of(nested)


def values_of(settings: object, cls: type[Any] | None = None) -> dict[str, Any]:
    """The settings' values by destination name, their groups' included."""
    out: dict[str, Any] = {}
    for f, value in _declared(settings, cls):
        if (declared := f.metadata.get(_SETTING)) is not None:
            out[declared.dest] = value
        elif (nested := f.metadata.get(_GROUP)) is not None:
            out.update(values_of(value, nested))
    return out


def settings_by_field(cls: type[Any]) -> dict[str, Setting]:
    """Each setting by its field's name (which stays when a flag is renamed), its groups'
    included."""
    out: dict[str, Setting] = {}
    for f in dataclasses.fields(cls):
        if (declared := f.metadata.get(_SETTING)) is not None:
            out[f.name] = declared
        elif (nested := f.metadata.get(_GROUP)) is not None:
            out.update(settings_by_field(nested))
    return out


def changed(settings: T, **values: Any) -> T:
    """``settings`` with some settings changed (already parsed), in its groups too, by field
    name or by destination name: a renamed flag keeps its field. An unknown name is a KeyError."""
    current = values_of(settings)
    by_field = settings_by_field(type(settings))
    values = {
        by_field[name].dest if name in by_field else name: value for name, value in values.items()
    }
    unknown = sorted(set(values) - set(current))
    if unknown:
        raise KeyError(f"{type(settings).__name__} has no setting {', '.join(unknown)}")
    rebuilt = build(type(settings), {**current, **values})
    undeclared = {
        f.name: getattr(settings, f.name)
        for f in dataclasses.fields(settings)  # type: ignore[arg-type]
        if _SETTING not in f.metadata and _GROUP not in f.metadata
    }
    return dataclasses.replace(rebuilt, **undeclared)  # type: ignore[type-var]


def build(cls: type[T], values: Mapping[str, Any] | object) -> T:
    """``cls`` from parsed values: a mapping by destination name, or an argparse Namespace.
    Fields that declare no setting keep their defaults."""
    get = values.get if isinstance(values, Mapping) else lambda name: getattr(values, name)
    given: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if (declared := f.metadata.get(_SETTING)) is not None:
            given[f.name] = get(declared.dest)
        elif (nested := f.metadata.get(_GROUP)) is not None:
            group_settings = build(nested, values)
            model = f.metadata.get(_BUILDS)
            given[f.name] = group_settings if model is None else model_of(group_settings, model)
    return cls(**given)


def log_fields(settings: object, cls: type[Any] | None = None) -> dict[str, Any]:
    """The settings as flat fields for the start-up log line (groups flattened)."""
    out: dict[str, Any] = {}
    for f, value in _declared(settings, cls):
        if (nested := f.metadata.get(_GROUP)) is not None:
            out.update(log_fields(value, nested))
        elif f.repr:
            out[f.name] = value
    return out
