"""Settings files read exactly as DeepRacer-for-cloud's `bin/activate.sh` reads them
(docs/settings.md). `dr-update-env` runs, for system.env and then run.env:

    LINES=$(grep -v '^#' FILE)
    for l in $LINES; do
      env_var=$(echo $l | cut -f1 -d\\=)
      env_val=$(echo $l | cut -f2 -d\\=)
      eval "export $env_var=$env_val"
    done

drgpu reads the part of that language whose meaning is certain, gets the value bash gets,
and refuses every other line with its file and line, never skipping one silently.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from drgpu.core.redaction import is_secret, redact, secret_values
from drgpu.errors import ConfigError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Outside quotes these start a command, a subshell, a redirection, brace or pathname
# expansion: DRfC's loop would run, split or glob them.
_REFUSED = {
    ";": "a `;` runs a second command",
    "&": "a `&` runs a command in the background",
    "|": "a `|` pipes into a command",
    **{mark: f"a `{mark}` is a redirection" for mark in "<>"},
    "(": "a `(` starts a subshell or an array",
    ")": "a `)` ends a subshell or an array",
    "`": "a backquote runs a command",
    "{": "a `{` is brace expansion (`{a,b}` sets the last one)",
    **{m: f"a `{m}` is a glob DRfC's loop expands against the current directory" for m in "*?["},
}
_SPECIAL_PARAMETERS = set("@*#?-$!0123456789")
# Variables bash sets itself whose value only DRfC's own shell knows (a random number, a
# clock, its process); UID and EUID are certain: the host passes them in.
_SHELL_ONLY = frozenset(
    ("RANDOM", "SRANDOM", "SECONDS", "LINENO", "BASHPID", "PPID", "EPOCHSECONDS", "EPOCHREALTIME")
)
_SHELL_ONLY_REFERENCES = frozenset(f"${name}" for name in _SHELL_ONLY)
_READ_ONLY = frozenset(("UID", "EUID", "PPID", "BASHPID"))
_QUOTE_HINT = "quote it ('...') or write it another way"
_UNMATCHED = "an unmatched {}: bash fails on the line, and DRfC leaves the key unset"


@dataclass(frozen=True)
class Origin:
    """Where a setting was written: a file's line, or (line 0) a place that is no file."""

    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" if self.line else str(self.path)


ENVIRONMENT = Origin(Path("the environment"), 0)


class _Unreadable(Exception):
    """A value outside what drgpu reads with certainty: why, and how to write it."""

    def __init__(
        self, reason: str, hint: str | None = None, *, echoes: bool = False, plain: str = ""
    ) -> None:
        super().__init__(reason)
        self.hint = hint
        self.echoes = echoes or bool(plain)  # the reason quotes the line: not for a secret
        self.plain = plain  # the reason told without quoting the line, where it can be


def read_env_texts(
    texts: list[tuple[Path, str]], environ: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, Origin], tuple[str, ...], tuple[str, ...]]:
    """The values, their origins, warnings and secret values (also one a later line replaced)
    of settings files evaluated in order, as `dr-update-env` does (a reference sees the keys
    set above it, then `environ`); a `ConfigError` naming `file:line` for a line refused."""
    values: dict[str, str] = {}
    held: dict[str, str] = {}  # every assignment, keyed `<n>_<key>`
    origins: dict[str, Origin] = {}
    warnings: list[str] = []
    expanded = 0
    for path, text in texts:
        # Split at newlines alone, as bash's `read` does (str.splitlines also splits at CR,
        # form feeds and Unicode separators, where DRfC reads one line).
        for number, line in enumerate(text.split("\n"), start=1):
            origin = Origin(path, number)
            try:
                found = _read_line(line, lambda name: values.get(name, environ.get(name)))
            except _Unreadable as exc:
                shown = redact(f"{origin}: {_told(exc, line)}", _written_secrets(texts, held))
                raise ConfigError(shown, hint=exc.hint) from None
            if found is None:
                continue
            key, value, warning = found
            expanded += len(value)
            if expanded > MAX_TOTAL_LENGTH:
                raise ConfigError(
                    f"{origin}: the settings expand to more than {MAX_TOTAL_LENGTH} characters"
                    " in all, the most drgpu reads (docs/limits.md)",
                    hint="Compose could not be started with an environment that large anyway",
                )
            values[key] = value
            held[f"{len(held)}_{key}"] = value
            origins[key] = origin
            if warning:
                warnings.append(f"{origin}: {warning}")
    return values, origins, tuple(warnings), secret_values(held)


def _written_secrets(texts: list[tuple[Path, str]], held: Mapping[str, str]) -> list[str]:
    """The secret values held so far and every one the files write (quotes stripped): an
    error quoting a line (`DR_X=a <secret>`) shows none of them. A value written as a
    reference to a variable only bash knows (`$RANDOM`) names it, and the error says its name."""
    words = (word for _, text in texts for word in text.split())
    written = {
        f"{n}_{key}": value.strip("'\"")
        for n, (key, _, value) in enumerate(word.partition("=") for word in words)
        if value.strip("'\"") not in _SHELL_ONLY_REFERENCES
    }
    return sorted({*secret_values(held), *secret_values(written)}, key=len, reverse=True)


def _read_line(
    line: str, lookup: Callable[[str], str | None]
) -> tuple[str, str, str | None] | None:
    """(key, value, a warning or None) of one line; None for a comment or a blank line."""
    if "\r" in line:
        raise _Unreadable(
            "a carriage return (CR, a Windows line ending): DRfC's activate.sh keeps it in"
            " the value",
            "convert the file: dos2unix FILE (or sed -i 's/\\r$//' FILE)",
        )
    if line.startswith("#"):
        return None
    if "\0" in line:
        raise _Unreadable("a NUL byte", "settings files are text")
    if not (words := _words(line)):
        return None
    if words[0].startswith("#"):  # indented: DRfC's grep keeps it, its loop reads each word
        _check_side_words(words, "this indented comment")
        return None
    if words[0] == "export" and len(words) > 1:
        words = words[1:]  # DRfC's loop exports a variable named `export`, then the setting
    assignment, rest = words[0], words[1:]
    warning = None
    if rest:
        if not rest[0].startswith("#"):
            raise _Unreadable(
                f"{_shown(line)} has a space in its value: DRfC's activate.sh splits a line"
                " at spaces and reads each word as a setting of its own",
                "write the value without spaces (quotes do not help: DRfC splits them too)",
                plain="a space in the value: DRfC's activate.sh splits a line at spaces",
            )
        _check_side_words(rest, "the comment after the value")
        warning = (
            "a comment after the value: DRfC's activate.sh exports each of its words as a"
            " variable; drgpu ignores it (put comments on lines of their own)"
        )
    key, equals, value = assignment.partition("=")
    if not equals:
        raise _Unreadable(
            f"{_shown(line)} is not a setting (KEY=VALUE)",
            "comment it out with # at the start",
            echoes=True,
        )
    if not _NAME.fullmatch(key):
        raise _Unreadable(
            f"{_shown(key)} is not a variable name (letters, digits and _, not first a digit)",
            echoes=True,
        )
    if key in _READ_ONLY:
        raise _Unreadable(f"{key} is read-only in bash: DRfC's activate.sh fails on the line")
    if "=" in value:
        kept = value.split("=", 1)[0]
        raise _Unreadable(
            f"{key}'s value has a second '=': DRfC's activate.sh keeps only {_shown(kept)}",
            "write the value without '='",
            plain="a second '=' in the value: DRfC's activate.sh keeps only what is before it",
        )
    try:  # the value bash's `eval "export KEY=<value>"` assigns
        return key, _Word(value, lookup).read(0, None, quoted=False)[0], warning
    except _Unreadable as exc:
        raise _Unreadable(f"{key}: {exc}", exc.hint, echoes=exc.echoes) from None


def _words(line: str) -> list[str]:
    """A line's words, split at spaces and tabs (bash's IFS, less the newline)."""
    return [word for word in line.replace("\t", " ").split(" ") if word]


def _told(exc: _Unreadable, line: str) -> str:
    """Why `line` is refused, without a word of its value where it names a secret."""
    names = (word.partition("=")[0] for word in _words(line))
    secret = next((name for name in names if is_secret(name)), None)
    if secret is None or not exc.echoes:
        return str(exc)
    why = exc.plain or "it is not a setting DRfC's activate.sh reads as written"
    return f"the line of secret {secret} (its value is not shown): {why}"


def _check_side_words(words: list[str], what: str) -> None:
    """Refuse words DRfC's loop would turn into a setting that matters, or evaluate.

    Each word `w` of a line becomes `eval "export ${w%%=*}=..."`: a `#word` is a no-op,
    `note` sets a harmless `note=note`, but `DR_WORKERS=3` or `$(cmd)` act."""
    for word in words:
        if word.startswith("#"):
            continue
        acts = "=" in word or word.startswith(("DR_", "DRGPU_"))
        if acts or any(mark in word for mark in ("$", "`", ";", "&", "|", "(", ")", "<", ">")):
            raise _Unreadable(
                f"{what} is read by DRfC's activate.sh word by word, and {_shown(word)}"
                " would be evaluated as a setting (only lines starting with # are comments)",
                "put the comment on a line of its own, with # as its first character",
                plain=f"{what} holds a word DRfC's activate.sh would evaluate as a setting",
            )


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


MAX_VALUE_LENGTH = 128 * 1024  # Linux passes no longer environment string (MAX_ARG_STRLEN)
MAX_TOTAL_LENGTH = 2 * 1024 * 1024  # all values together: Linux's ARG_MAX (8 MiB stack)


class _Value(list[str]):
    """The parts of a value being expanded, refused once longer than MAX_VALUE_LENGTH."""

    length = 0

    def add(self, piece: str) -> None:
        self.length += len(piece)
        if self.length > MAX_VALUE_LENGTH:
            raise _Unreadable(
                f"the value expands to more than {MAX_VALUE_LENGTH} characters, the most"
                " drgpu reads in one value (docs/limits.md)",
                "Compose cannot pass a longer value to a container anyway",
            )
        self.append(piece)


class _Word:
    """A recursive-descent reader of one bash word in an assignment."""

    def __init__(self, text: str, lookup: Callable[[str], str | None]):
        self.text = text
        self.lookup = lookup

    def read(self, start: int, stop: str | None, *, quoted: bool) -> tuple[str, int]:
        """Read from `start` up to `stop` (a `}` closing `${...}`) or the end; `quoted`:
        inside "...", returning after the closing quote."""
        text, i = self.text, start
        parts = _Value()
        tilde_here = not quoted
        while i < len(text):
            char = text[i]
            if stop is not None and char == stop:
                return "".join(parts), i
            if char == "~" and tilde_here:
                parts.add(self._tilde(i + 1, stop))
                i += 1
                continue
            tilde_here = char == ":" and not quoted
            if char == "\\":
                following = text[i + 1 : i + 2]
                kept = '$`"\\' + ("}" if stop else "") if quoted else following
                escaped = bool(following) and following in kept
                parts.add(following if escaped else "\\")
                i += 2 if escaped else 1
            elif char == '"' and quoted:
                if stop is not None:
                    raise _Unreadable('a " inside ${...} inside "..."', "drop the inner quotes")
                return "".join(parts), i + 1
            elif char == '"':
                value, i = self.read(i + 1, None, quoted=True)
                parts.add(value)
            elif char == "'" and quoted and stop is not None:
                raise _Unreadable('a \' inside ${...} inside "..." (bash keeps it literally)')
            elif char == "'" and not quoted:
                end = text.find("'", i + 1)
                if end < 0:
                    raise _Unreadable(_UNMATCHED.format("'"), "close the quote")
                parts.add(text[i + 1 : end])
                i = end + 1
            elif char == "$":
                value, i = self.dollar(i, quoted=quoted)
                parts.add(value)
            elif char == "`" and quoted:
                raise _Unreadable(_REFUSED["`"], "drgpu runs no command from a settings file")
            elif char in _REFUSED and not quoted:
                raise _Unreadable(_REFUSED[char], _QUOTE_HINT)
            else:
                parts.add(char)
                i += 1
        if stop is not None:
            raise _Unreadable("an unmatched ${ (no closing })")
        if quoted:
            raise _Unreadable(_UNMATCHED.format('"'), "close the quote")
        return "".join(parts), i

    def dollar(self, start: int, *, quoted: bool) -> tuple[str, int]:
        """Expand the `$...` at `start`; returns the value and where reading goes on."""
        text, i = self.text, start + 1
        following = text[i] if i < len(text) else ""
        if (name := _NAME.match(text, i)) is not None:
            return self._value(name[0]) or "", name.end()
        if following == "{":
            return self.braced(i + 1, quoted=quoted)
        if following == "(":
            raise _Unreadable("$( runs a command", "drgpu runs no command from a settings file")
        if following in ("'", '"') and not quoted:
            raise _Unreadable(
                f"${following}...{following} quoting", "use plain quotes", echoes=True
            )
        if following and following in _SPECIAL_PARAMETERS:
            raise _Unreadable(f"${following} is a shell parameter, not a setting", echoes=True)
        return "$", i  # a lone `$` is itself

    def braced(self, start: int, *, quoted: bool) -> tuple[str, int]:
        """`${NAME}`, `${NAME-w}`, `${NAME:-w}`, `${NAME+w}` or `${NAME:+w}` from `start`."""
        text = self.text
        if (name := _NAME.match(text, start)) is None:
            raise _Unreadable("${...} without a variable name", "write ${NAME}")
        i = name.end()
        current = self._value(name[0])
        if text.startswith("}", i):
            return current or "", i + 1
        operator = next((op for op in (":-", ":+", "-", "+") if text.startswith(op, i)), None)
        if operator is None:
            raise _Unreadable(
                f"${{{name[0]}...}} with an operator drgpu does not read: it reads ${{NAME}},"
                " ${NAME:-default} and ${NAME:+alternative} (with or without the colon)",
                echoes=True,
            )
        word, end = self.read(i + len(operator), "}", quoted=quoted)
        is_set = current is not None and (current != "" or ":" not in operator)
        if operator.endswith("-"):
            return (current or "" if is_set else word), end + 1
        return (word if is_set else ""), end + 1

    def _value(self, name: str) -> str | None:
        """A variable's value; one only DRfC's own shell knows is refused."""
        if name in _SHELL_ONLY:
            raise _Unreadable(
                f"${name} is set by DRfC's own shell (bash), with a value drgpu cannot know",
                "write the value itself",
            )
        return self.lookup(name)

    def _tilde(self, following: int, stop: str | None) -> str:
        text = self.text
        after = text[following] if following < len(text) else ""
        if after not in ("", "/", ":") and after != stop:
            raise _Unreadable("a ~name (another user's home)", "write the path in full")
        if (home := self.lookup("HOME")) is None:  # as bash: a HOME set above counts
            raise _Unreadable("a ~ while HOME is not set", "write the path in full")
        return home
