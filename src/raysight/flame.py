"""A profile's stacks (collapsed: root first, ``;`` between frames, each frame ``function (file:line)`` as py-spy
names it) drawn as users of profilers read them: folded lines (Brendan Gregg's format, what flamegraph.pl and
speedscope import), speedscope's JSON, a flame graph as a self-contained SVG, and a top table of functions. Pure."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from html import escape
from typing import Any

Stacks = list[tuple[str, int]]  # (collapsed stack, weight: samples)
_FRAME = re.compile(r"^(?P<name>.*) \((?P<file>.*):(?P<line>\d+)\)$")

WIDTH, ROW, FONT = 1200, 17, 12  # the SVG's width, a frame's height, its text's size (px)
PAD, CHAR = 10, 7.0  # the margin; about how wide a character of the font is


def weighed(profile: dict[str, Any], cpu_only: bool = False) -> Stacks:
    """A profile's stacks (``[stack, samples, on_cpu]``, as ``GET /api/raysight/profile`` answers them) weighed by
    their samples, or by those on CPU."""
    return [(stack, on_cpu if cpu_only else samples) for stack, samples, on_cpu in profile["stacks"]]


def titled(named: str, profile: dict[str, Any], cpu_only: bool = False) -> str:
    """A profile's title: what it is of and what it adds up to (``1 attempt, 40 samples: 2.00s sampled, 1.95s on
    CPU``), and whether it shows the samples on CPU alone."""
    attempts = f"{profile['attempts']} attempt{'s' * (profile['attempts'] != 1)}"
    sums = f"{profile['samples']:,} samples: {profile['wall_s']:.2f}s sampled, {profile['cpu_s']:.2f}s on CPU"
    return f"{named} — {attempts}, {sums}" + (" (the samples on CPU)" if cpu_only else "")


def profile_svg(named: str, profile: dict[str, Any], cpu_only: bool = False) -> str:
    """A profile (as ``GET /api/raysight/profile`` answers it) as its flame graph, titled."""
    unit = "samples on CPU" if cpu_only else "samples"
    return flame_svg(weighed(profile, cpu_only), titled(named, profile, cpu_only), unit)


def capture_of(capture: dict[str, Any]) -> str:
    """What a profile of a live process (as ``GET /api/raysight/profiles/{id}`` answers it) is of: the task or actor
    it was asked of, or Serve's capture file (and its actor)."""
    if capture["task_id"]:
        return f"task {capture['task_id']}, attempt {capture['attempt']}"
    actor = f"actor {capture['actor_id']}" if capture["actor_id"] else None
    if capture.get("file"):
        return f"Serve's {capture['file']}" + (f", {actor}" if actor else "")
    return actor or f"session {capture['session']}"


def capture_title(capture: dict[str, Any]) -> str:
    """An on-demand profile's title: what it is of, over how long, and what its stacks add up to."""
    what = {"stack": "Stacks", "cpu": "CPU", "memory": "Memory at its peak"}[capture["kind"]]
    what = "Memory still allocated" if capture["leaks"] else what
    lasting = f" over {capture['duration_s']:g}s" if capture["duration_s"] else ""
    total = sum(weight for _, weight in capture["stacks"])
    sums = f"{total / 1e6:,.1f} MB" if capture["unit"] == "bytes" else f"{total:,} samples"
    return f"{what} of pid {capture['pid']} ({capture_of(capture)}){lasting}: {sums} — profile {capture['capture_id']}"


def capture_svg(capture: dict[str, Any]) -> str:
    """An on-demand profile's stacks as its flame graph, titled."""
    stacks = [(stack, weight) for stack, weight in capture["stacks"]]
    return flame_svg(stacks, capture_title(capture), capture["unit"] or "samples")


def collapsed(stacks: Stacks) -> str:
    """One line a stack: the stack, a space, its weight."""
    return "".join(f"{stack} {weight}\n" for stack, weight in stacks)


def _function(frame: str) -> str:
    """A frame less its line: its function and file."""
    m = _FRAME.match(frame)
    return f"{m['name']} ({m['file']})" if m else frame


def top(stacks: Stacks, lines: bool = False) -> list[dict[str, Any]]:
    """Each function (its lines together; each line apart where ``lines``) with the weight of the stacks it ends
    (``own``) and of those it is in (``total``, once a stack however often it recurs), most own first (py-spy top's
    columns)."""
    own: dict[str, int] = {}
    total: dict[str, int] = {}
    for stack, weight in stacks:
        functions = [frame if lines else _function(frame) for frame in stack.split(";")]
        own[functions[-1]] = own.get(functions[-1], 0) + weight
        for function in set(functions):
            total[function] = total.get(function, 0) + weight
    rows = [{"function": f, "own": own.get(f, 0), "total": t} for f, t in total.items()]
    return sorted(rows, key=lambda row: (-row["own"], -row["total"], row["function"]))


def speedscope(stacks: Stacks, name: str, seconds_each: float | None = None) -> dict[str, Any]:
    """speedscope's file format (https://www.speedscope.app/file-format-schema.json): one sampled profile, a
    sample a stack weighted by its samples (in seconds where ``seconds_each`` tells a sample's)."""
    frames: dict[str, int] = {}
    samples = [[frames.setdefault(frame, len(frames)) for frame in stack.split(";")] for stack, _ in stacks]
    weights = [weight * seconds_each if seconds_each else weight for _, weight in stacks]

    def frame(label: str) -> dict[str, Any]:
        m = _FRAME.match(label)
        return {"name": m["name"], "file": m["file"], "line": int(m["line"])} if m else {"name": label}

    return {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": {"frames": [frame(label) for label in frames]},
        "profiles": [
            {
                "type": "sampled",
                "name": name,
                "unit": "seconds" if seconds_each else "none",
                "startValue": 0,
                "endValue": sum(weights),
                "samples": samples,
                "weights": weights,
            }
        ],
        "name": name,
        "exporter": "raysight",
    }


@dataclass
class _Node:
    weight: int = 0
    children: dict[str, _Node] = field(default_factory=dict)


def _tree(stacks: Stacks) -> _Node:
    root = _Node()
    for stack, weight in stacks:
        root.weight += weight
        node = root
        for frame in stack.split(";"):
            node = node.children.setdefault(frame, _Node())
            node.weight += weight
    return root


def _depth(node: _Node) -> int:
    return 1 + max((_depth(child) for child in node.children.values()), default=0)


def _color(frame: str) -> str:
    """A warm color, the same for a function wherever it is (flamegraph.pl's palette)."""
    h = hashlib.blake2b(_function(frame).encode(), digest_size=3).digest()
    return f"rgb({205 + h[0] % 50},{h[1] % 230},{h[2] % 55})"


_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # what no XML document may hold


def _text(text: str) -> str:
    """``text`` as an SVG's text: escaped, and less what XML cannot hold (a stack is a worker's to name)."""
    return escape(_NOT_XML.sub("\ufffd", text))


def flame_svg(stacks: Stacks, title: str, unit: str = "samples") -> str:
    """A flame graph: the root at the bottom, each frame as wide as its weight, siblings by name; each frame's
    function, and its weight and share, in its tooltip."""
    root = _tree(stacks)
    depth = _depth(root) - 1
    height = (depth + 1) * ROW + 3 * PAD + FONT * 2
    scale = (WIDTH - 2 * PAD) / max(root.weight, 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="Verdana, sans-serif" font-size="{FONT}">',
        '<rect width="100%" height="100%" fill="#fdf6e8"/>',
        f'<text x="{WIDTH / 2}" y="{PAD + FONT}" text-anchor="middle" font-size="{FONT + 4}">{_text(title)}</text>',
    ]
    bottom = height - PAD - ROW

    def draw(name: str, node: _Node, x: float, level: int) -> None:
        width = node.weight * scale
        if width < 0.5:  # (narrower than a pixel: not drawn, nor what it holds)
            return
        y = bottom - level * ROW
        share = 100 * node.weight / max(root.weight, 1)
        tip = f"{name} — {node.weight:,} {unit} ({share:.2f}%)"
        parts.append(
            f'<g><title>{_text(tip)}</title><rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{ROW - 1}" '
            f'fill="{_color(name)}" rx="2"/>'
        )
        if (fits := int((width - 6) / CHAR)) >= 3:
            text = name if len(name) <= fits else name[: fits - 2] + ".."
            parts.append(f'<text x="{x + 3:.1f}" y="{y + ROW - 5}">{_text(text)}</text>')
        parts.append("</g>")
        for child_name, child in sorted(node.children.items()):
            draw(child_name, child, x, level + 1)
            x += child.weight * scale

    draw("all", root, PAD, 0)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
