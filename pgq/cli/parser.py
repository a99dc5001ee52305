"""The argument parser class of the `pgq` command: argparse's, with "did you mean" on typos."""

from __future__ import annotations

import argparse
import difflib
import re
from typing import Any, NoReturn

__all__ = ["Parser"]


class Parser(argparse.ArgumentParser):
    """argparse's parser, with "did you mean" on typos: an unknown option of a command is reported by
    that command (its usage, and the closest of its options), and a misspelt command name gets the
    closest command. Sub-command parsers are of this class too (argparse makes them of the parent's)."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """As argparse's, except that this parser reports its own unknown options at once (exit 2)."""
        parsed, extras = super().parse_known_args(args, namespace)
        unknown = [arg.split("=", 1)[0] for arg in extras if arg.startswith("-") and arg != "-"]
        if unknown:
            options = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
            hints = []
            for option in unknown:
                close = difflib.get_close_matches(option, options, n=1, cutoff=0.6)
                hints.append(f"{option} (did you mean {close[0]}?)" if close else option)
            self.error(f"unrecognized option{'s' if len(unknown) > 1 else ''}: {', '.join(hints)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        """Print the usage and `message` (with the closest choice to a misspelt one) and exit 2."""
        match = _INVALID_CHOICE.search(message)
        if match:
            choices = re.findall(r"'([^']*)'", match.group("choices"))
            close = difflib.get_close_matches(match.group("given"), choices, n=1, cutoff=0.6)
            if close:
                message = f"{message} (did you mean {close[0]!r}?)"
        super().error(message)


_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<given>[^']*)' \(choose from (?P<choices>.*)\)")
