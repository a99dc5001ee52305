"""A strict parser of the Prometheus text exposition format (version 0.0.4), for the metrics tests.

`parse(text)` checks what a scraper relies on and fails with AssertionError otherwise: every line is a
comment or a well-formed sample; each family has at most one HELP and one TYPE, given before its
samples; samples of a family are contiguous; no sample (name and labels) appears twice; counters end
in `_total`; histogram buckets are cumulative, end with `le="+Inf"`, and +Inf equals `_count`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SAMPLE = re.compile(rf"^({NAME})(\{{.*\}})? (\S+)$")
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\\\|\\"|\\n)*)"\s*(,|$)')
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}

Labels = tuple[tuple[str, str], ...]


@dataclass
class Family:
    """One metric family: its type, help text, and samples {(sample name, labels): value}."""

    name: str
    type: str = "untyped"
    help: str | None = None
    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)

    def value(self, suffix: str = "", **labels: str) -> float:
        """The value of the sample `name + suffix` with exactly `labels` (KeyError if absent)."""
        return self.samples[(self.name + suffix, tuple(sorted(labels.items())))]


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "\\": "\\", '"': '"'}[m.group(1)], text)


def _labels(text: str | None) -> Labels:
    if not text:
        return ()
    body, pairs, pos = text[1:-1], {}, 0
    while pos < len(body):
        match = LABEL.match(body, pos)
        assert match, f"bad labels {text!r}"
        key, value = match.group(1), _unescape(match.group(2))
        assert key not in pairs, f"label {key} twice in {text!r}"
        pairs[key] = value
        pos = match.end()
    return tuple(sorted(pairs.items()))


def _value(text: str) -> float:
    if text in ("+Inf", "-Inf", "NaN"):
        return float(text.replace("Inf", "inf").replace("NaN", "nan"))
    assert re.fullmatch(r"-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?", text), f"bad value {text!r}"
    return float(text)


def _family_of(sample: str, families: dict[str, Family]) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        base = sample.removesuffix(suffix)
        if base != sample and families.get(base) is not None and families[base].type == "histogram":
            return base
    return sample


def parse(text: str) -> dict[str, Family]:
    """Parse and check an exposition; return its families by name."""
    assert text.endswith("\n"), "the exposition must end with a newline"
    families: dict[str, Family] = {}
    finished: set[str] = set()
    current: str | None = None
    for line in text[:-1].split("\n"):
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                assert re.fullmatch(NAME, name), f"bad name in {line!r}"
                family = families.setdefault(name, Family(name))
                assert not family.samples, f"{parts[1]} of {name} after its samples"
                if parts[1] == "TYPE":
                    assert len(parts) == 4 and parts[3] in TYPES, f"bad TYPE line {line!r}"
                    assert family.type == "untyped", f"TYPE of {name} twice"
                    family.type = parts[3]
                else:
                    assert family.help is None, f"HELP of {name} twice"
                    family.help = parts[3] if len(parts) == 4 else ""
            continue
        assert line.strip(), "empty line"
        match = SAMPLE.match(line)
        assert match, f"bad sample line {line!r}"
        name, labels, value = match.group(1), _labels(match.group(2)), _value(match.group(3))
        base = _family_of(name, families)
        if base != current:
            assert base not in finished, f"samples of {base} are not contiguous"
            if current is not None:
                finished.add(current)
            current = base
        family = families.setdefault(base, Family(base))
        assert (name, labels) not in family.samples, f"duplicate sample {line!r}"
        family.samples[(name, labels)] = value
    for family in families.values():
        if family.type == "counter":
            assert family.name.endswith("_total"), f"counter {family.name} must end in _total"
            assert all(v >= 0 for v in family.samples.values()), f"negative counter {family.name}"
        if family.type == "histogram":
            _check_histogram(family)
    return families


def _check_histogram(family: Family) -> None:
    series: dict[Labels, list[tuple[float, float]]] = {}
    for (name, labels), value in family.samples.items():
        if name == family.name + "_bucket":
            le = dict(labels)["le"]
            rest = tuple(p for p in labels if p[0] != "le")
            series.setdefault(rest, []).append((_value(le), value))
    for labels, buckets in series.items():
        bounds = [b for b, _ in buckets]
        assert bounds == sorted(bounds) and bounds[-1] == math.inf, f"buckets of {labels} out of order or no +Inf"
        counts = [c for _, c in buckets]
        assert counts == sorted(counts), f"buckets of {labels} not cumulative: {counts}"
        assert family.samples[(family.name + "_count", labels)] == counts[-1], f"+Inf != _count for {labels}"
        assert (family.name + "_sum", labels) in family.samples, f"no _sum for {labels}"
