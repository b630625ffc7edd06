"""The mined tables of one ``asof`` time, with the retrieval vectors and the queries derived
from them: what every candidate source and the scorer read (:mod:`candidates`, :mod:`recent`,
:mod:`scorer`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass
class Mined:
    """The mined tables of one ``asof`` (DataFrames) and the optional retrieval factors."""

    asof: datetime
    pair_stats: object
    item_stats: object
    user_stats: object
    cooccurrence: object
    user_factors: object = None
    item_factors: object = None
    choice_users: object = None  # choice-model vectors (choice.py), same schema as the factors
    choice_items: object = None  # the same plus ``bias`` (b_j; absent in older partitions)
    queries: object = None  # (every user query, their unit item vectors), see recent.py
    short: object = None  # (short-interest queries, item audiences), see recent.py

    def release(self, factors: bool = False) -> None:
        """Unpersist the frames this object holds (the tables, the recent and short queries;
        the factors too when ``factors``: callers that share them across ``asof`` times keep
        them). A session that mines many ``asof`` times (the transfer report, the evaluation)
        would otherwise keep them all. Uncached frames (read from parquet) are left as they
        are; the object can still be used, Spark recomputes."""
        frames = [self.pair_stats, self.item_stats, self.user_stats, self.cooccurrence]
        if factors:
            frames += [self.user_factors, self.item_factors, self.choice_users, self.choice_items]
        if self.queries is not None:
            frames += [self.queries[0], *self.queries[1].values()]
        frames.extend(self.short or ())
        for frame in frames:
            if frame is not None and frame.is_cached:
                frame.unpersist()
        self.queries = self.short = None
