"""Tables that fit the terminal: every header and value whole, never cut with an ellipsis.

A table names its columns in the order they are drawn, each with a rank: rank 0 is always drawn,
and when the table is wider than the console the column of the highest rank goes first, then the
next, until it fits. What a narrow terminal leaves out is there at a wider one (or in `aiperf show`).
A column of long text (an operator, a verdict) may take more lines, breaking at spaces; every other
column keeps each value on one line. Only when even the rank-0 columns do not fit does a word fold,
and never into "…". Tables have no box, as `gh` and `uv` draw theirs: the headers in bold, two
spaces between columns, and the title on a line of its own above, so a long title never wraps
inside the table's width.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

Justify = Literal["left", "right"]
GAP = 2  # spaces between two columns: each pads one on either side


@dataclass(frozen=True)
class Col:
    """A column: its header, which side its values sit on, how soon it goes when space is short
    (0: never; the highest rank goes first), and whether its values may take more lines, breaking
    at spaces (the others stay on one line each)."""

    header: str
    justify: Justify = "left"
    rank: int = 0
    style: str | None = None
    wrap: bool = False

    def width(self, cells: Sequence[str], wrapped: bool) -> int:
        """The columns this one needs: its longest line; when `wrapped`, its longest word if it
        may wrap."""
        texts = [self.header, *cells]
        if wrapped and self.wrap:
            return max(cell_len(word) for text in texts for word in text.split() or [""])
        return max(cell_len(line) for text in texts for line in text.splitlines() or [""])


class FitTable:
    """A table drawn with as many of its columns as the width it is drawn at allows, under an
    optional title; a renderable, so it fits wherever it is printed."""

    def __init__(
        self,
        columns: Sequence[Col],
        rows: Sequence[Sequence[str]],
        *,
        title: str | None = None,
        show_header: bool = True,
    ) -> None:
        self.columns = list(columns)
        self.rows = [list(row) for row in rows]
        self.title = title
        self.show_header = show_header

    def needs(self, shown: Sequence[int], wrapped: bool) -> int:
        """How wide the table of the `shown` columns draws: each value on one line, or (when
        `wrapped`) the wrapping columns as narrow as their longest word."""
        widths = [self.columns[i].width([row[i] for row in self.rows], wrapped) for i in shown]
        return sum(widths) + GAP * max(0, len(widths) - 1)

    def table(self, width: int) -> Table:
        """The widest table that fits `width` with every value on one line, columns dropped by
        rank, highest first; else, when not even the rank-0 columns fit so, the widest that fits
        with long text taking more lines."""
        choices = [list(range(len(self.columns)))]
        for rank in sorted({c.rank for c in self.columns if c.rank > 0}, reverse=True):
            choices.append([i for i in choices[-1] if self.columns[i].rank != rank])
        for wrapped in (False, True):
            for shown in choices:
                if self.needs(shown, wrapped) <= width:
                    return self._pick(shown)
        return self._pick(choices[-1], squeezed=True)

    def _pick(self, shown: list[int], squeezed: bool = False) -> Table:
        """The table of the `shown` columns; `squeezed`, every column may wrap and fold (a value
        that does not fit its line is folded onto the next, never cropped)."""
        table = Table(box=None, show_header=self.show_header, pad_edge=False, padding=(0, 1))
        for i in shown:
            col = self.columns[i]
            table.add_column(
                col.header,
                justify=col.justify,
                style=col.style,
                no_wrap=not (col.wrap or squeezed),
                overflow="fold",
            )
        for row in self.rows:
            table.add_row(*(row[i] for i in shown))
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.title is not None:
            yield Text(self.title, style="bold")
        yield self.table(options.max_width)
