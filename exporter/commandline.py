"""``nodesync``'s command line, derived from the settings' declarations (exporter.settings).

Every declared setting becomes a flag whose default is its environment variable, else its
declared default: command line over environment over default. A malformed value, on the
command line or in the environment, stops the program with one line naming the flag or the
variable. Booleans are ``--flag`` / ``--no-flag`` and also take ``--flag=true|false``. Former
flag names (``aliases``) still work and are reported as deprecated. Abbreviated flags are
refused: ``--web.listen-addres`` is an error, not a guess.

A command is a subparser with its settings, the logging settings, ``--version``, and the
function that runs it. The product's commands are added by exporter.cli; other packages add
theirs through the ``nodesync.commands`` entry point group: each entry point names a function
``register(commands, environ)`` that calls :func:`add_command`. Registering declares flags only;
a command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NoReturn, TypeAlias, TypeVar

from exporter import __version__
from exporter.logs import LogSettings
from exporter.settings.declare import Setting, build, env_name, settings_of
from exporter.settings.values import BOOLEAN

T = TypeVar("T")

COMMAND_GROUP = "nodesync.commands"

CommandSet: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Run = Callable[[argparse.Namespace], int]
Register = Callable[[CommandSet, Mapping[str, str]], None]

#: Where parsed arguments keep the deprecation notices to log once logging is set up.
DEPRECATED = "_nodesync_deprecated"
#: Where parsed arguments keep the parser of the command they run (for its one-line errors).
COMMAND_PARSER = "_nodesync_parser"


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line (``nodesync agent: error: ...; try
    --help``) instead of a usage block, as Prometheus' tools print them. An unrecognized flag is
    reported by the command it was given to, with the flag it abbreviates or resembles."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; try {self.prog} --help\n")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, COMMAND_PARSER, None)
            parser = command if isinstance(command, argparse.ArgumentParser) else self
            parser.error(unrecognized(parser, extras))
        return parsed


def unrecognized(parser: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    """``unrecognized arguments: ...``, with the flag each unknown one abbreviates or resembles
    (flags are never guessed: ``--web.listen-addres`` is an error that names
    ``--web.listen-address``)."""
    import difflib  # only a mistyped command line needs it: not imported by every agent

    known = [o for o in parser._option_string_actions if o.startswith("--")]
    hints = []
    for extra in extras:
        name = extra.split("=", 1)[0]
        if not name.startswith("--"):
            continue
        found = sorted(o for o in known if o.startswith(name)) or difflib.get_close_matches(
            name, known, n=1
        )
        if found:
            hints.append(f"{name}: did you mean {' or '.join(found[:3])}?")
    message = f"unrecognized arguments: {' '.join(extras)}"
    if hints:
        message += f" ({'; '.join(hints)} Flags are never abbreviated)"
    return message


class SettingAction(argparse.Action):
    """Stores a setting's value; knows its declaration (for the docs) and its former names."""

    def __init__(self, *args: Any, setting: Setting, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.setting = setting

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        _note_alias(self.setting, namespace, option_string)
        setattr(namespace, self.dest, values)


class BooleanAction(SettingAction):
    """``--flag`` (true), ``--flag=false``/``--flag false``, ``--no-flag`` (false)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        _note_alias(self.setting, namespace, option_string)
        if option_string is not None and option_string.startswith("--no-"):
            if values is not None:
                parser.error(f"{option_string} takes no value")
            setattr(namespace, self.dest, False)
            return
        setattr(namespace, self.dest, True if values is None else values)


def _note_alias(setting: Setting, namespace: argparse.Namespace, option: str | None) -> None:
    if option is None:
        return
    bare = "--" + option.removeprefix("--no-") if option.startswith("--no-") else option
    if bare in setting.aliases:
        notes = namespace.__dict__.setdefault(DEPRECATED, [])
        notes.append(f"{option} is deprecated: use {setting.flag}")


class _BooleanUsage(argparse.Action):
    """How a boolean reads in a usage line: ``--[no-]flag``, as node-exporter's flags."""

    def __init__(self, action: BooleanAction) -> None:
        super().__init__(action.option_strings, action.dest, nargs=0, help=action.help)

    def format_usage(self) -> str:
        return "--[no-]" + self.option_strings[0].removeprefix("--")

    def __call__(self, *args: Any, **kwargs: Any) -> None:  # never parses
        raise NotImplementedError


class HelpFormatter(argparse.HelpFormatter):
    """Shows a boolean as ``--flag, --no-flag`` in the help and ``[--[no-]flag]`` in the usage
    line: no placeholder (``--rollback.delete-nodes [BOOL]`` read as if it took a value)."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if isinstance(action, BooleanAction):
            return ", ".join(action.option_strings)
        return super()._format_action_invocation(action)

    def _format_actions_usage(self, actions: Any, groups: Any) -> str:
        shown = [_BooleanUsage(a) if isinstance(a, BooleanAction) else a for a in actions]
        return super()._format_actions_usage(shown, groups)


def _flags(setting: Setting, *names: str) -> list[str]:
    """The option strings of ``names`` (``--flag``, and ``--no-flag`` for a boolean)."""
    if setting.kind is not BOOLEAN:
        return list(names)
    return [n for name in names for n in (name, "--no-" + name[2:])]


def _environment_value(
    setting: Setting, environ: Mapping[str, str], parser: argparse.ArgumentParser
) -> Any:
    """The default: the environment variable (or a former flag's), else the declared one."""
    names = [setting.environment]
    names += [n for n in map(env_name, setting.aliases) if not setting.env and n not in names]
    name = next((n for n in names if n in environ), None)
    if name is None:
        return setting.value()
    try:
        return setting.kind(environ[name])
    except (argparse.ArgumentTypeError, ValueError) as exc:
        parser.error(f"environment variable {name}: {exc}")


def add_settings(
    parser: argparse.ArgumentParser, environ: Mapping[str, str], classes: Iterable[type[Any]]
) -> None:
    """Add a flag for every setting the classes declare. A setting shared by two classes (the
    same declaration) is added once; two declarations of one flag are a bug."""
    added: dict[str, Setting] = {}
    for cls in classes:
        for setting in settings_of(cls):
            if setting.flag in added:
                if added[setting.flag] is not setting:
                    raise ValueError(f"{setting.flag} is declared twice")
                continue
            added[setting.flag] = setting
            boolean = setting.kind is BOOLEAN
            common: dict[str, Any] = {
                "dest": setting.dest,
                "action": BooleanAction if boolean else SettingAction,
                "nargs": "?" if boolean else None,
                "type": setting.kind,
                "default": _environment_value(setting, environ, parser),
                "metavar": setting.kind.metavar,
                "setting": setting,
            }
            parser.add_argument(
                *_flags(setting, setting.flag),
                help=f"{setting.help} (env {setting.environment}, default {setting.default!r})",
                **common,
            )
            if setting.aliases:  # former names: accepted, reported, not shown in --help
                parser.add_argument(
                    *_flags(setting, *setting.aliases), help=argparse.SUPPRESS, **common
                )


def parse_settings(
    cls: type[T], argv: Sequence[str], environ: Mapping[str, str], *, prog: str = "nodesync"
) -> T:
    """``cls`` from a command line and an environment, as a command would parse them."""
    parser = ArgumentParser(prog=prog, allow_abbrev=False, formatter_class=HelpFormatter)
    add_settings(parser, environ, [cls])
    return build(cls, parser.parse_args(argv))


def add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action="version", version=f"nodesync {__version__}")


def add_command(
    commands: CommandSet,
    name: str,
    environ: Mapping[str, str],
    *,
    run: Run,
    help: str,
    description: str,
    settings: Sequence[type[Any]] = (),
) -> argparse.ArgumentParser:
    """Add the command ``name`` with the flags of ``settings``, the logging settings and
    ``--version``; ``run(args)`` runs it."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=help,
        description=description,
        allow_abbrev=False,
        formatter_class=HelpFormatter,
    )
    parser.set_defaults(run=run, **{COMMAND_PARSER: parser})
    add_version(parser)
    add_settings(parser, environ, [*settings, LogSettings])
    return parser


def registered_commands() -> list[Register]:
    """The ``register`` functions of the installed packages' commands, by entry point name."""
    from importlib.metadata import entry_points  # only when every command is built

    found = sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name)
    return [e.load() for e in found]


def deprecations(args: argparse.Namespace) -> list[str]:
    """The deprecated flags the command line used, one notice each."""
    return list(getattr(args, DEPRECATED, ()))
